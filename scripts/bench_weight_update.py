"""A weight update with calls in flight: keeping their KV cache against dropping it.

Starts vLLM in this process (the default model, the CPU settings of
serve_configs/engine_cpu.yaml) and drives harbor_ray's `WeightUpdater` on it, through a
replica that calls vLLM's own methods where the Serve replica calls `LLMServer`'s. Each
round puts --in-flight calls in flight (a --prompt-tokens prompt each, --max-tokens
sampled), waits until each has sampled --before tokens, updates the weights (to a copy
scaled by 1.001, then back), and lets the calls finish. Once with the cache kept across
the update (`clear_cache=False`, the default), once dropped (`clear_cache=True`).

Per mode it prints the update's wall seconds, the prefill tokens recomputed after it
(tokens a preempted call prefilled again that the prefix cache did not serve, from
vLLM's scheduler stats: its Prometheus counters leave preempted calls out), the
preemptions, and the seconds from the update's start until every call finished; then the
keep/clear ratios.

    flock /tmp/engine.lock .venv/bin/python scripts/bench_weight_update.py \\
        [--in-flight 8] [--prompt-tokens 512] [--max-tokens 192] [--before 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harbor_ray.engine.config import WORKER_EXTENSION  # noqa: E402
from harbor_ray.engine.model import prepare_model  # noqa: E402
from harbor_ray.engine.weights import LABEL_METHOD, WeightUpdater  # noqa: E402
from scripts.bench_weights import scaled_copy  # noqa: E402


class InProcessReplica:
    """An `EngineReplica` over an in-process `AsyncLLM`: the `LLMServer` methods the
    updater calls, answered by the vLLM methods `LLMServer` forwards them to."""

    name = "in-process"

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    async def call(self, method: str, /, **kwargs: Any) -> Any:
        if method == "pause":
            return await self.llm.pause_generation(**kwargs)
        if method == "resume":
            return await self.llm.resume_generation()
        if method == "collective_rpc":
            return await self.llm.collective_rpc(
                kwargs["method"], timeout=kwargs["timeout"], kwargs=kwargs["kwargs"]
            )
        if method == LABEL_METHOD:
            return await self.llm.update_weight_version(kwargs["version"])
        raise ValueError(f"no such method {method}")


@dataclass(frozen=True)
class Round:
    update_s: float
    recomputed: float
    preemptions: float
    drain_s: float


def counters() -> dict[str, float]:
    """vLLM's preemption counter in this process, and the prefill of preempted requests
    that the prefix cache did not serve (`Recomputed`)."""
    from vllm.v1.metrics.reader import Counter, get_metrics_snapshot

    totals = {"vllm:num_preemptions": 0.0, "recomputed": float(Recomputed.tokens)}
    for metric in get_metrics_snapshot():
        if isinstance(metric, Counter) and metric.name in totals:
            totals[metric.name] += metric.value
    return totals


def recompute_logger() -> type:
    """A vLLM stat logger that sums the prefill tokens of preempted requests the prefix
    cache did not serve. vLLM's Prometheus counters (`vllm:prefix_cache_queries`, `_hits`)
    count new requests only: a preempted request's second prefill is kept apart in
    `PrefixCacheStats.preempted_queries`/`preempted_hits`, which it does not export."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class Tally(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                cache = scheduler_stats.prefix_cache_stats
                Recomputed.tokens += cache.preempted_queries - cache.preempted_hits

        def log_engine_initialized(self) -> None:
            pass

    return Tally


class Recomputed:
    tokens = 0


async def one_round(
    llm: Any, updater: WeightUpdater, path: str, args: argparse.Namespace, seed: int
) -> Round:
    from vllm import SamplingParams

    rng = random.Random(seed)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, temperature=0)
    sampled = [0] * args.in_flight
    reached = asyncio.Event()

    async def call(k: int) -> None:
        prompt = {
            "prompt_token_ids": [rng.randrange(100, 40_000) for _ in range(args.prompt_tokens)]
        }
        async for output in llm.generate(prompt, params, f"r{seed}-{k}"):
            sampled[k] = len(output.outputs[0].token_ids)
            if min(sampled) >= args.before:
                reached.set()

    calls = [asyncio.create_task(call(k)) for k in range(args.in_flight)]
    await reached.wait()
    before = counters()
    started = time.perf_counter()
    result = await updater.update(path, updater.version + 1)
    update_s = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"update failed: {result}")
    await asyncio.gather(*calls)
    drain_s = time.perf_counter() - started
    after = counters()
    preempted, recomputed = (after[name] - before[name] for name in before)
    return Round(update_s, recomputed, preempted, drain_s)


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    served = prepare_model()
    llm = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=str(served),
            dtype="float32",
            max_model_len=4096,
            enable_prefix_caching=True,
            worker_extension_cls=WORKER_EXTENSION,
            disable_log_stats=False,
        ),
        stat_loggers=[recompute_logger()],
    )
    replica = InProcessReplica(llm)

    async def replicas() -> list[InProcessReplica]:
        return [replica]

    rounds: dict[str, Round] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-weight-update-") as scratch:
            scaled = str(scaled_copy(served, Path(scratch) / "scaled", 1.001))
            for mode, drop in (("keep", False), ("clear", True)):
                updater = WeightUpdater(
                    replicas, path=str(served), clear_cache=drop, version=len(rounds) * 2
                )
                await one_round(llm, updater, scaled, args, seed=len(rounds))  # warm-up
                rounds[mode] = await one_round(
                    llm, updater, str(served), args, seed=len(rounds) + 10
                )
    finally:
        llm.shutdown()
    print(
        f"{args.in_flight} calls in flight, {args.prompt_tokens}-token prompts, "
        f"{args.before}+ of {args.max_tokens} tokens sampled at the update"
    )
    for mode, r in rounds.items():
        print(
            f"{mode:>5}: update {r.update_s:6.3f} s  prefill recomputed "
            f"{r.recomputed:8.0f} tokens  preemptions {r.preemptions:4.0f}  "
            f"calls done {r.drain_s:6.2f} s after the update began"
        )
    keep, clear = rounds["keep"], rounds["clear"]
    print(
        f"keep/clear: update time {keep.update_s / clear.update_s:.2f}x, prefill "
        f"recomputed {keep.recomputed:.0f}/{clear.recomputed:.0f}, time to finish the "
        f"calls {keep.drain_s / clear.drain_s:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=8, help="calls in flight")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="each call's prompt")
    parser.add_argument("--max-tokens", type=int, default=192, help="each call's sample")
    parser.add_argument(
        "--before", type=int, default=32, help="tokens each call has sampled when the update starts"
    )
    asyncio.run(main(parser.parse_args()))
