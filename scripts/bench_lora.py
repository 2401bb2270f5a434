"""What a LoRA weight update costs against a full one: seconds and bytes, save and load.

Each update is what `WeightSync` does after an optimizer step: save (peft's
`save_pretrained` of a rank-`--rank` adapter on q_proj and v_proj, random A and B; or
the whole model's `save_pretrained`), then the engine's update through `WeightUpdater`
on every replica. Adapters load into `--lora-app` (an engine with `lora:`), full
weights into `--full-app` (one without, since full weights on a LoRA engine are
refused; without it, full weights are only saved). Prints the median of `--runs` of
each: save seconds, bytes written, update seconds step by step.

    harbor-ray engine up --config engine_lora.yaml --address ADDRESS   # first
    .venv/bin/python scripts/bench_lora.py --address ADDRESS --lora-app engine-lora \\
        [--full-app engine] [--runs 5]

`--config` starts the LoRA engine here instead (a Serve YAML whose application has
`lora:`), and removes it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from harbor_ray.engine.lifecycle import engine_down, engine_up
from harbor_ray.engine.model import prepare_model
from harbor_ray.engine.replicas import serve_weight_updater
from harbor_ray.engine.weights import WeightUpdate, WeightUpdater
from harbor_ray.switches import set_switches


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def timed(
    updater: WeightUpdater | None,
    save: Callable[[Path], None],
    scratch: Path,
    runs: int,
    label: str,
) -> None:
    """`runs` saves and updates (None: saves only), each to a new directory as
    `WeightSync` makes them."""
    saves, sizes, results = [], [], []
    for run in range(runs):
        version = run + 1 if updater is None else updater.version + 1
        path = scratch / f"{label}-version-{version}"
        started = time.perf_counter()
        save(path)
        saves.append(time.perf_counter() - started)
        sizes.append(directory_bytes(path))
        if updater is not None:
            result: WeightUpdate = await updater.update(str(path), version)
            if not result.ok:
                raise SystemExit(f"{label} update failed: {result}")
            results.append(result)

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.3f}"

    steps = "  ".join(
        f"{step} {median([r.step_seconds[step] for r in results])}"
        for step in (results[0].step_seconds if results else ())
    )
    update = (
        f"update {steps}  total {median([r.seconds for r in results])} s"
        if results
        else "no engine to update"
    )
    print(
        f"{label:<8} save {median(saves)} s, {statistics.median(sizes):,.0f} bytes;  "
        f"{update}  (median of {runs})"
    )


def adapter_saver(model_dir: Path, rank: int) -> Callable[[Path], None]:
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    model: Any = get_peft_model(base, config)

    def save(path: Path) -> None:
        with torch.no_grad():  # a new adapter each time, as a training step makes one
            for name, param in model.named_parameters():
                if "lora_" in name:
                    param.mul_(1.001)
        model.save_pretrained(path, safe_serialization=True)

    return save


def full_saver(model_dir: Path) -> Callable[[Path], None]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    def save(path: Path) -> None:
        model.save_pretrained(path, safe_serialization=True)

    return save


async def main(args: argparse.Namespace) -> None:
    served = args.model_dir or prepare_model()
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as scratch:
        lora = serve_weight_updater(args.lora_app, str(served))
        await timed(lora, adapter_saver(served, args.rank), Path(scratch), args.runs, "adapter")
        full = (
            None
            if args.full_app is None
            else serve_weight_updater(args.full_app, str(served), version=args.full_version)
        )
        await timed(full, full_saver(served), Path(scratch), args.runs, "full")
        if full is not None:  # the original weights back (the copies hold the same numbers)
            await full.update(str(served), full.version + 1)


if __name__ == "__main__":
    set_switches()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--address", default=None, help="the engines' Ray cluster (default: a local one)"
    )
    parser.add_argument(
        "--config", type=Path, help="start the LoRA engine from this Serve YAML here, and stop it"
    )
    parser.add_argument(
        "--lora-app", default="engine-lora", help="the Serve application of the engine with `lora:`"
    )
    parser.add_argument(
        "--full-app", default=None, help="the Serve application of an engine without `lora:`"
    )
    parser.add_argument(
        "--full-version", type=int, default=0, help="the version --full-app serves now"
    )
    parser.add_argument("--model-dir", type=Path, help="the checkpoint the engines serve")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    ray.init(address=arguments.address, log_to_driver=False)
    if arguments.config is not None:
        arguments.lora_app = engine_up(arguments.config, progress=print).app_name
    try:
        asyncio.run(main(arguments))
    finally:
        if arguments.config is not None:
            engine_down(arguments.lora_app)
