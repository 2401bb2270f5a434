"""What the capture proxy adds as a Ray Serve deployment: latency (p50/p99) and calls/s.

The cluster path of a model call: agent -> ingress -> a CaptureProxy replica -> admit on
the session's owner -> the stub engine -> record on the owner (awaited before the reply)
-> agent. Two ingresses are compared: `serve`, Serve's shared HTTP proxy (the route
prefix), and `direct`, the rollout host's relay spliced to the replicas' own sockets
(what sweeps use by default). A third, `host`, has no replicas: a rollout host serves the
capture app for its own sessions (`sweep --ingress host`). The owner is a rollout host,
as in a sweep, so the relay's CPU and the owner's are one process. One run measures, at
each concurrency, the stub engine called directly and the same engine through each
ingress (one session per client), alternating, and prints the figures and their ratios,
with the CPU the cluster's processes (Serve proxy, replicas, hosts) burn per call and
the bare owner round trip that admit and record each cost.

    .venv/bin/python scripts/bench_cluster_proxy.py [--concurrency 1 64 512] \\
        [--ingress serve direct host] [--seconds 10] [--replicas 2] [--ray-address auto]

Run it with the venv's python, not `uv run` (Ray would start its workers through uv).
With `RAY_SERVE_ENABLE_HA_PROXY=1` in the environment (and a local cluster), the `serve`
ingress goes through Serve's bundled HAProxy instead of its Python HTTP proxy (whose CPU
is then still listed, but idle; HAProxy's own is not counted).
"""

# ruff: noqa: E402  (the switches are set before Ray is imported, below)
from __future__ import annotations

from harbor_ray.switches import set_switches

set_switches()  # Ray reads its uv switch once, when imported

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from typing import Any, get_args

import ray

# scripts/ is not a package; run as a script, this directory is on sys.path.
from bench_proxy import (
    AGENT_BODY,
    DIRECT_BODY,
    Figures,
    _median,
    cpu_seconds,
    free_port,
    load,
    run_engine,
    wait_up,
)

from harbor_ray.cluster.host import Ingress, ProxyTarget, start_host
from harbor_ray.cluster.proxy_deployment import deploy_capture_proxy, remove_capture_proxy
from harbor_ray.serve_http import serve_details

APP = "capture_bench"


def _pid(_actor: Any) -> int:
    return os.getpid()


def cluster_pids(owner: Any, capturing_host: Any | None) -> dict[str, int]:
    """The processes a proxied call runs through, by role (Serve proxy, replicas, host,
    and the host that serves the proxy itself, for `host` ingress)."""
    details = serve_details()
    actors = {
        f"serve proxy {node[:6]}": ray.get_actor(p.actor_name, namespace="serve")
        for node, p in details.proxies.items()
    }
    for deployment in details.applications[APP].deployments.values():
        for replica in deployment.replicas:
            actors[f"replica {replica.replica_id}"] = ray.get_actor(
                replica.actor_name, namespace="serve"
            )
    actors["host"] = owner
    if capturing_host is not None:
        actors["capturing host"] = capturing_host
    return {role: ray.get(actor.__ray_call__.remote(_pid)) for role, actor in actors.items()}


async def owner_round_trip(
    owner: Any, session_id: str, concurrency: int, seconds: float
) -> Figures:
    """A bare actor call to the owner (what admit and record each cost), closed loop."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await owner.grant.remote(session_id)
            latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return Figures(
        p50_ms=1000 * statistics.median(latencies),
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        calls_per_s=len(latencies) / elapsed,
        errors=0,
        calls=len(latencies),
    )


async def bench(
    args: argparse.Namespace,
    targets: dict[str, tuple[str, list[str]]],
    engine_url: str,
    owner: Any,
    capturing_host: Any | None,
    session_id: str,
) -> None:
    """`targets`: per ingress, its URL and the keys of sessions its sessions' owner made."""
    pids = cluster_pids(owner, capturing_host)
    keys = next(iter(targets.values()))[1]
    print(
        f"stub engine answers after {args.engine_delay_ms:.0f} ms; {args.replicas} "
        f"replica(s); {args.seconds:.0f} s per measurement; {args.rounds} round(s), "
        f"alternating direct engine / each ingress; medians shown"
    )
    print(f"cluster processes measured for CPU: {', '.join(sorted(pids))}")
    header = (
        f"{'conc':>5} {'ingress':>7} | {'engine p50/p99 ms':>18} {'calls/s':>8} | "
        f"{'proxy p50/p99 ms':>18} {'calls/s':>8} | {'added p50/p99 ms':>17} | "
        f"{'p99 ratio':>9} {'thru ratio':>10} | cluster CPU ms/call | owner RTT p50/p99 "
        f"| errors"
    )
    print(header)
    print("-" * len(header))
    breakdown = []
    for c in args.concurrency:
        direct_runs: list[Figures] = []
        proxy_runs: dict[str, list[Figures]] = {ingress: [] for ingress in targets}
        cpu_ms: dict[str, dict[str, list[float]]] = {
            ingress: {role: [] for role in pids} for ingress in targets
        }
        for _ in range(args.rounds):
            direct_runs.append(await load(engine_url, keys[:c], args.seconds, DIRECT_BODY))
            for ingress, (url, ingress_keys) in targets.items():
                before = {role: cpu_seconds(pid) for role, pid in pids.items()}
                run = await load(url, ingress_keys[:c], args.seconds, AGENT_BODY)
                proxy_runs[ingress].append(run)
                for role, pid in pids.items():
                    spent = cpu_seconds(pid) - before[role]
                    cpu_ms[ingress][role].append(1000 * spent / max(1, run.calls))
        rtt = await owner_round_trip(owner, session_id, c, min(args.seconds, 3.0))
        d = _median(direct_runs)
        for ingress in targets:
            per_role = {role: statistics.median(v) for role, v in cpu_ms[ingress].items()}
            breakdown.append((c, ingress, per_role))
            p = _median(proxy_runs[ingress])
            print(
                f"{c:>5} {ingress:>7} | {d.p50_ms:8.1f} / {d.p99_ms:7.1f} "
                f"{d.calls_per_s:8.0f} | {p.p50_ms:8.1f} / {p.p99_ms:7.1f} "
                f"{p.calls_per_s:8.0f} | {p.p50_ms - d.p50_ms:7.1f} / "
                f"{p.p99_ms - d.p99_ms:7.1f} | {p.p99_ms / d.p99_ms:9.2f} "
                f"{p.calls_per_s / d.calls_per_s:10.2f} | {sum(per_role.values()):19.2f} | "
                f"{rtt.p50_ms:7.2f} / {rtt.p99_ms:6.2f} | {d.errors + p.errors}"
            )
    print("\ncluster CPU ms per proxied call, by process:")
    for c, ingress, per_role in breakdown:
        print(
            f"{c:>5} {ingress:>7} | "
            + ", ".join(f"{role} {ms:.2f}" for role, ms in sorted(per_role.items()))
        )


def _sessions(host: Any, count: int) -> list[Any]:
    return ray.get([host.open.remote(budget=None, sampling=None) for _ in range(count)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 64],
        help="closed-loop clients (one session each); add 512 for the saturation figure",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a measurement")
    parser.add_argument(
        "--engine-delay-ms",
        type=float,
        default=20.0,
        help="how long the stub engine takes per call",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating direct/proxy repetitions per concurrency"
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--ingress",
        nargs="+",
        choices=get_args(Ingress),
        default=["serve", "direct", "host"],
        help="serve: Serve's HTTP proxy; direct: the host's relay; host: "
        "a host serving the proxy itself (no replicas)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="join this cluster (e.g. auto) instead of starting a local one",
    )
    args = parser.parse_args()

    if args.ray_address:
        ray.init(address=args.ray_address)
    else:
        # A short temp dir: Ray's unix sockets must fit in 107 bytes.
        ray.init(
            include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="hr-bench-", dir="/tmp")
        )
    engine_port = free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    engine = mp.get_context("spawn").Process(
        target=run_engine, args=(engine_port, args.engine_delay_ms / 1000), daemon=True
    )
    engine.start()
    owner = capturing_host = None
    try:
        asyncio.run(wait_up(engine_url))
        serve_url = deploy_capture_proxy(
            engine_url,
            "fake-model",
            replicas=args.replicas,
            app_name=APP,
            route_prefix="/capture-bench",
            http_port=free_port(),
        )
        # A rollout host without rollouts: it owns the sessions and runs the relay.
        owner = start_host(
            f"bench{uuid.uuid4().hex[:6]}",
            num_cpus=0,
            proxy=ProxyTarget(serve_url, "fake-model", "direct", app=APP),
        )
        sessions = _sessions(owner, max(args.concurrency))
        targets = {
            "serve": (serve_url, sessions),
            "direct": (ray.get(owner.capture_url.remote()), sessions),
        }
        if "host" in args.ingress:
            capturing_host = start_host(
                f"bench{uuid.uuid4().hex[:6]}",
                num_cpus=0,
                proxy=ProxyTarget(engine_url, "fake-model", ingress="host"),
            )
            targets["host"] = (
                ray.get(capturing_host.capture_url.remote()),
                _sessions(capturing_host, max(args.concurrency)),
            )
        targets = {
            ingress: (url, [s.key for s in opened])
            for ingress, (url, opened) in targets.items()
            if ingress in args.ingress
        }
        for url, _ in targets.values():
            asyncio.run(wait_up(url))
        asyncio.run(bench(args, targets, engine_url, owner, capturing_host, sessions[0].session_id))
    finally:
        remove_capture_proxy(APP)
        for host in (owner, capturing_host):
            if host is not None:
                ray.kill(host)
        engine.terminate()
        engine.join(5)


if __name__ == "__main__":
    main()
