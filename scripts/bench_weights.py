"""What an in-flight weight update of the running engine costs, step by step.

Prints, for updates with and without requests in flight, each step's wall seconds
(pause, reload, label, resume; all replicas at once) and the whole update's, as the
median of `--runs` updates. The updates alternate between the served checkpoint and a
copy with every weight scaled by 1.001 (made here, in a temporary directory), so each
one really changes the weights; the served checkpoint is what serves at the end.

    harbor-ray engine up --address ADDRESS ...      # first: an engine on a Ray cluster
    .venv/bin/python scripts/bench_weights.py --address ADDRESS [--runs 5] [--in-flight 4]

`--model-dir` is the checkpoint the engine serves now (default: the prepared default
model); the first update's version is `--version` + 1.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
from pathlib import Path

import httpx
import ray
from safetensors.torch import load_file, save_file

from harbor_ray.engine.model import prepare_model
from harbor_ray.engine.replicas import serve_weight_updater
from harbor_ray.engine.weights import STEPS, WeightUpdate, WeightUpdater
from harbor_ray.serve_http import serve_http_base
from harbor_ray.switches import set_switches


def scaled_copy(source: Path, target: Path, factor: float) -> Path:
    """`source` with every tensor of its safetensors files multiplied by `factor`."""
    shutil.copytree(source, target)
    for file in target.glob("*.safetensors"):
        tensors = {name: t * factor for name, t in load_file(file).items()}
        save_file(tensors, file, metadata={"format": "pt"})
    return target


async def generate(url: str, model: str, tokens: int) -> None:
    body = {
        "model": model,
        "max_tokens": tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    async with httpx.AsyncClient(timeout=900) as client:
        response = await client.post(f"{url}/chat/completions", json=body)
        response.raise_for_status()


async def timed_updates(
    updater: WeightUpdater, paths: list[str], runs: int, in_flight: int, url: str, model: str
) -> list[WeightUpdate]:
    results = []
    for run in range(runs):
        load = [asyncio.create_task(generate(url, model, 256)) for _ in range(in_flight)]
        if load:
            await asyncio.sleep(2.0)  # let them reach decoding
        result = await updater.update(paths[run % 2], updater.version + 1)
        if not result.ok:
            raise SystemExit(f"update failed: {result}")
        await asyncio.gather(*load)
        results.append(result)
    return results


def report(label: str, results: list[WeightUpdate]) -> None:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):7.3f}"

    ran = [s for s in STEPS if s in results[0].step_seconds]  # `cache` only if asked
    steps = "  ".join(f"{s} {median([r.step_seconds[s] for r in results])}" for s in ran)
    print(
        f"{label:<22} {steps}  total {median([r.seconds for r in results])} s"
        f"  (median of {len(results)})"
    )


async def main(args: argparse.Namespace) -> None:
    served = args.model_dir or prepare_model()
    updater = serve_weight_updater(args.app, str(served), version=args.version)
    url = f"{serve_http_base()}/v1"
    model = httpx.get(f"{url}/models", timeout=60).json()["data"][0]["id"]
    with tempfile.TemporaryDirectory(prefix="bench-weights-") as scratch:
        scaled = scaled_copy(served, Path(scratch) / "scaled", 1.001)
        paths = [str(scaled), str(served)]
        # Even run counts end on the served checkpoint.
        runs = args.runs + args.runs % 2
        report("idle engine", await timed_updates(updater, paths, runs, 0, url, model))
        report(
            f"{args.in_flight} requests in flight",
            await timed_updates(updater, paths, runs, args.in_flight, url, model),
        )
    print(f"serving {updater.path} as version {updater.version}")


if __name__ == "__main__":
    set_switches()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="auto", help="the engine's Ray cluster")
    parser.add_argument("--app", default="engine", help="the engine's Serve application")
    parser.add_argument("--model-dir", type=Path, help="the checkpoint it serves now")
    parser.add_argument("--version", type=int, default=0, help="the version serving now")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=4)
    arguments = parser.parse_args()
    ray.init(address=arguments.address, log_to_driver=False)
    asyncio.run(main(arguments))
