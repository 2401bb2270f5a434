"""Rollouts per minute against concurrency: the sweep driver, its hosts and the capture
proxy deployment, with a stub agent and a stub engine, so that what is measured is the
cluster's own overhead.

The stub agent (harbor_ray.cluster.stub_agent, run on the hosts like a real rollout)
makes `--calls` chat calls through the proxy replicas to the stub engine, `--think`
seconds apart; its row, turns and sequences are written to Parquet like any other.
At each concurrency C the sweep runs `--waves` x C rollouts; the figures are wall-clock
rollouts/min, model calls/s through the proxy, and the in-flight peak the driver
measured.

    .venv/bin/python scripts/bench_sweep.py [--concurrency 10 100 1000] [--calls 3]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray

from harbor_ray.capture.certify import certify
from harbor_ray.capture.engine import HttpEngine
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.stub_agent import chat_agent
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.local_run import make_specs


def start_engine(delay_ms: float) -> tuple[subprocess.Popen, str]:
    sock_port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harbor_ray.capture.fake_engine",
                             "--port", str(sock_port), "--delay-ms", str(delay_ms)])
    return proc, f"http://127.0.0.1:{sock_port}/v1"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _certified(llm_url: str) -> str:
    engine = HttpEngine(llm_url)
    try:
        for _ in range(100):
            try:
                return (await certify(engine, engine.root)).served_model
            except Exception:  # the stub is still starting
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the stub engine at {llm_url} never answered")
    finally:
        await engine.aclose()


async def one_level(concurrency: int, args: argparse.Namespace, proxy: ProxyTarget,
                    out_root: Path) -> dict[str, float]:
    tasks = select_tasks(resolve_dataset("samples"), ["hello-file"])
    count = concurrency * args.waves
    out = out_root / f"c{concurrency}"
    specs = make_specs(tasks, count, agent="terminus-2", sandbox="local",
                       trials_dir=out / "trials", run_id=f"bench{concurrency}")
    per_host = args.per_host or max(8, math.ceil(concurrency / args.max_hosts))
    config = SweepConfig(out=out, concurrency=concurrency, per_host=per_host, proxy=proxy,
                         retries=0)
    started = time.perf_counter()
    stats = await sweep(specs, config, {}, work=chat_agent(args.calls, args.think))
    wall = time.perf_counter() - started
    return {"concurrency": concurrency, "rollouts": count, "ok": stats.ok,
            "hosts": math.ceil(concurrency / per_host), "peak": stats.peak_in_flight,
            "wall_s": wall, "per_min": 60 * count / wall,
            "calls_per_s": count * args.calls / wall, "errors": dict(stats.by_error)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--waves", type=int, default=2, help="rollouts = waves x concurrency")
    parser.add_argument("--calls", type=int, default=3, help="model calls per rollout")
    parser.add_argument("--think", type=float, default=0.5,
                        help="seconds the stub agent waits between calls")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="stub engine latency")
    parser.add_argument("--replicas", type=int, default=2, help="capture proxy replicas")
    parser.add_argument("--ingress", choices=get_args(Ingress), default="direct",
                        help="agents reach the replicas via their host's relay or Serve, "
                             "or the hosts serve the proxy themselves (no replicas)")
    parser.add_argument("--per-host", type=int, default=None,
                        help="rollouts per host (default: enough for --max-hosts hosts)")
    parser.add_argument("--max-hosts", type=int, default=20)
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args()

    temp_dir = None
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        temp_dir = tempfile.mkdtemp(prefix="hr-bench-", dir="/tmp")
        ray.init(_temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    engine, llm_url = start_engine(args.delay_ms)
    rows = []
    proxy = None
    try:
        served_model = asyncio.run(_certified(llm_url))
        proxy = start_capture_proxy(llm_url, served_model, ingress=args.ingress,
                                    replicas=args.replicas)
        with tempfile.TemporaryDirectory(prefix="hr-bench-out-") as out_root:
            for concurrency in args.concurrency:
                row = asyncio.run(one_level(concurrency, args, proxy, Path(out_root)))
                rows.append(row)
                print(f"c={concurrency}: {row}", flush=True)
    finally:
        if proxy is not None:
            stop_capture_proxy(proxy)
        engine.terminate()
        ray.shutdown()
    print(f"\n{args.calls} calls per rollout, {args.think:g} s think time, stub engine "
          f"{args.delay_ms:g} ms, {args.replicas} proxy replicas ({args.ingress} ingress), "
          f"{args.waves} waves")
    print("| concurrency | rollouts | ok | hosts | peak in flight | wall s | rollouts/min "
          "| model calls/s | vs c=first |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = rows[0]["per_min"] if rows else 1
    for r in rows:
        print(f"| {r['concurrency']} | {r['rollouts']} | {r['ok']} | {r['hosts']} | "
              f"{r['peak']} | {r['wall_s']:.1f} | {r['per_min']:.0f} | "
              f"{r['calls_per_s']:.1f} | {r['per_min'] / base:.1f}x |")


if __name__ == "__main__":
    main()
