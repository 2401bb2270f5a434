"""What a warm pool saves the local sandbox: a trial's time to its first command (its
environment's `start` and one `exec("true")`), with its own sandbox started then
(unpooled) and with one taken ready from its host's warm pool (pooled), from one run.

The pooled rounds wait until the pool's refill has its next sandbox ready before each
trial, as a pool sized for its load does; what the refill itself costs is the unpooled
figure, paid before the trial asks. Modes alternate round by round, so drift in the
machine's load falls on both alike. Sandboxes go to a temporary directory under `--dir`.
With `--forward`, each sandbox has the proxy's port forward a rollout of a model-calling
agent has (its relay, a Python process inside, starts with the sandbox).

    .venv/bin/python scripts/bench_warm_pool.py [--rounds 20] [--forward] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment
from harbor_ray.trials.sandbox.pooled import BwrapBackend, register_pool, unregister_pool
from harbor_ray.trials.warm_pool import Ledger, WarmPool

ENVIRONMENT = "bench-task"


async def first_command(root: Path, number: int, pooled: bool, forward: bool) -> float:
    """Seconds from the environment's start to the end of its first command."""
    environment = BwrapEnvironment(
        environment_dir=root / "environment",
        environment_name=ENVIRONMENT,
        session_id=f"t{number}__env",
        trial_paths=TrialPaths(root / f"t{number}"),
        task_env_config=EnvironmentConfig(),
        sandboxes_dir=root / "sandboxes",
        warm_pool="bench" if pooled else None,
        # Nothing need listen there: the relay inside starts all the same.
        forward={18080: "127.0.0.1:9"} if forward else None,
    )
    started = time.perf_counter()
    await environment.start(force_build=False)
    await environment.exec("true")
    seconds = time.perf_counter() - started
    assert environment.pooled is pooled
    await environment.stop(delete=True)
    return seconds


async def bench(rounds: int, root: Path, forward: bool) -> dict[str, list[float]]:
    backend = BwrapBackend(root / "sandboxes")
    pool = WarmPool(backend, {ENVIRONMENT: 1}, Ledger(root / "ledger"))
    register_pool("bench", pool, backend)
    figures: dict[str, list[float]] = {"unpooled": [], "pooled": []}
    try:
        await first_command(root, 0, True, forward)  # shows the pool its recipe
        for number in range(1, rounds + 1):
            figures["unpooled"].append(await first_command(root, 2 * number, False, forward))
            while pool.ready(ENVIRONMENT) < 1:
                await asyncio.sleep(0.01)
            figures["pooled"].append(await first_command(root, 2 * number + 1, True, forward))
    finally:
        unregister_pool("bench")
        await pool.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--forward", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-warm-pool-", dir=args.dir) as root:
        figures = asyncio.run(bench(args.rounds, Path(root), args.forward))
    medians = {mode: statistics.median(seconds) for mode, seconds in figures.items()}
    for mode, seconds in figures.items():
        print(
            f"{mode:9s} time to first command: median {medians[mode] * 1000:7.1f} ms, "
            f"min {min(seconds) * 1000:7.1f} ms, max {max(seconds) * 1000:7.1f} ms "
            f"({len(seconds)} trials)"
        )
    print(f"unpooled / pooled: {medians['unpooled'] / medians['pooled']:.1f}x")


if __name__ == "__main__":
    main()
