"""Rollouts per minute against concurrency: the sweep driver, its hosts and the capture
proxy deployment, with a stub agent and a stub engine, so that what is measured is the
cluster's own overhead.

The stub agent (tests/fixtures/stub_agent.py, run on the hosts like a real rollout)
makes `--calls` chat calls through the proxy to the stub engine, `--think` seconds
apart; its row, turns and sequences are written to Parquet like any other. At each
concurrency C the sweep runs `--waves` x C rollouts; the figures are wall-clock
rollouts/min, model calls/s through the proxy, the in-flight peak the driver measured,
and where the time went: host start-up (until every slot had begun a rollout), then
rollouts/min from there on against C x 60 / the work's own median seconds (the ratio),
and per rollout the session's open and close, the work, the time from the work's end to
its row's commit, and the driver's time in the writer. Last, what the target rate
(half of C x 60 / the least concurrent level's work seconds, the unstretched time) asks
of the CPU: the cores it needs at each level's CPU per rollout, against this machine's,
and the rate at which the processes a cluster has only one of (the driver, Ray's GCS)
would cap a sweep however many nodes run its hosts.

    .venv/bin/python scripts/bench_sweep.py [--concurrency 10 100 1000] [--calls 3]

`--netns-nodes N` (as root) runs the same on a real Ray cluster of N nodes made on this
machine (tests/fixtures/multinode.py: each node in its own network namespace on a
bridge, the stub engine in one more), the driver on the head, and adds the cluster's
CPU per model call: the CPU time of every process in the nodes' namespaces (driver,
hosts with their stub agents, replicas, owners, Ray's own), not the engine's, from the
end of the first wave (hosts started) to the last row, over the calls of the rollouts
that ended in between. `--netns-nodes 1` is the one-node baseline on the same footing.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, get_args

import _procfs as procfs
import pyarrow.parquet as pq
import ray

# The repo root, for the tests' fixtures (the stub agent, the namespaced cluster). Run
# from the root, as above: Ray puts the driver's working directory on its workers' path,
# and the hosts' workers import the stub agent's module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.switches import set_switches
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.fake_engine import free_port
from tests.fixtures.stub_agent import chat_agent


def start_engine(delay_ms: float) -> tuple[subprocess.Popen, str]:
    sock_port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harbor_ray.capture.proxy.fake_engine",
            "--port",
            str(sock_port),
            "--delay-ms",
            str(delay_ms),
        ]
    )
    return proc, f"http://127.0.0.1:{sock_port}/v1"


async def certified_model(llm_url: str) -> str:
    """The model the stub engine at `llm_url` serves, once it answers."""
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


def netns_cpu_s(namespaces: list[str]) -> float:
    """CPU seconds used so far by the live processes in `namespaces` (with their waited-for
    children's)."""
    total = 0
    for ns in namespaces:
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            if (fields := procfs.stat_fields(pid)) is not None:
                total += procfs.cpu_s(fields, children=True)
    return total


def process_class(pid: int, driver: int, engine: int | None) -> str:
    """What a process of the sweep is, by its pid or its (Ray-set) title."""
    if pid == driver:
        return "driver"
    if pid == engine:
        return "stub engine"
    title = (procfs.cmdline(pid) or b"").replace(b"\0", b" ").decode()
    if not title.strip():
        return "gone"  # a zombie
    if title.startswith("ray::RolloutHost"):
        return "hosts"
    if title.startswith("ray::"):
        return "other Ray workers"
    program, *rest = title.split()
    if Path(program).name in ("raylet", "gcs_server"):
        return Path(program).name
    # Ray's Python daemons (dashboard agent, log monitor, ...) by their script's name.
    script = next((Path(a).name for a in rest if a.endswith(".py")), Path(program).name)
    return f"Ray {script.removesuffix('.py')}"


def tree_cpu_s(driver: int, engine: int | None) -> dict[int, tuple[str, float]]:
    """Each live process under `driver` (itself included: Ray's daemons and workers, the
    stub engine): its class and CPU seconds so far, its own only (a child's are its own
    entry, so that nothing counts twice)."""
    stats = procfs.snapshot()
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(procfs.parent(fields), []).append(pid)
    out, todo = {}, [driver]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if pid in stats:
            out[pid] = (process_class(pid, driver, engine), procfs.cpu_s(stats[pid]))
    return out


def cpu_by_class(
    start: dict[int, tuple[str, float]], end: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each process class used between two `tree_cpu_s` readings (a process
    that started in between counts from zero; one that ended is lost, as are its
    seconds: few and short-lived here, such as reaper tasks)."""
    used: dict[str, float] = {}
    for pid, (name, seconds) in end.items():
        before = start.get(pid, (name, 0.0))[1]
        used[name] = used.get(name, 0.0) + seconds - before
    return used


def threads_cpu_s(pids: list[int]) -> dict[str, float]:
    """CPU seconds so far of the threads of `pids`, summed by thread name (Python's main
    thread against Ray's core-worker and gRPC threads, which a Python profiler misses)."""
    used: dict[str, float] = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip()
            except OSError:
                continue
            if (fields := procfs.stat_fields(f"{pid}/task/{task.name}")) is not None:
                # Numbered threads of one pool (e.g. "worker.1") count as one name.
                key = name.rstrip("0123456789").rstrip(".-_") or name
                used[key] = used.get(key, 0.0) + procfs.cpu_s(fields)
    return used


class Profiler:
    """py-spy (given by path: it is not a project dependency) on one host, the driver and
    the stub engine over the steady state, then each profile's hottest functions. It
    samples the thread holding the GIL: Python's CPU (the hosts' threads, from /proc, say
    how much else there is)."""

    def __init__(self, py_spy: str, directory: Path) -> None:
        self.py_spy, self.directory = py_spy, directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._running: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(self, tree: dict[int, tuple[str, float]]) -> None:
        first: dict[str, int] = {}
        for pid, (name, _) in sorted(tree.items()):
            first.setdefault(name, pid)
        for name in ("hosts", "driver", "stub engine"):
            if name in first:
                path = self.directory / f"{name.replace(' ', '_')}-{first[name]}.txt"
                proc = subprocess.Popen(
                    [
                        self.py_spy,
                        "record",
                        "--pid",
                        str(first[name]),
                        "--format",
                        "raw",
                        "--nonblocking",
                        "--gil",
                        "--rate",
                        "200",
                        "-o",
                        str(path),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                self._running[name] = (proc, path)

    def stop(self) -> None:
        for proc, _ in self._running.values():
            proc.send_signal(2)  # SIGINT: py-spy writes its profile and exits
        for proc, _ in self._running.values():
            proc.wait(timeout=60)

    def summaries(self, top: int = 12) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, (_, path) in self._running.items():
            if path.exists():
                out[name] = hottest(path.read_text(), top) | {"file": str(path)}
        return out


def hottest(raw: str, top: int) -> dict[str, Any]:
    """From py-spy's raw (collapsed) stacks: the share of samples in each function itself
    and in each function with its callees (once per stack)."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + n

    def ranked(counts: dict[str, int]) -> list[str]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [f"{100 * n / max(samples, 1):.1f}% {frame}" for frame, n in best]

    return {"samples": samples, "self": ranked(own), "inclusive": ranked(total)}


def _short(frame: str) -> str:
    """`func (path/to/module.py:12)` as `func (module.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.rsplit(':', 1)[0]).name})" if where else name


async def one_level(
    concurrency: int,
    args: argparse.Namespace,
    proxy: ProxyTarget,
    out_root: Path,
    engine_pid: int | None,
) -> dict[str, Any]:
    tasks = select_tasks(resolve_dataset("samples"), ["hello-file"])
    count = concurrency * args.waves
    out = out_root / f"c{concurrency}"
    specs = make_specs(
        tasks,
        count,
        agent="terminus-2",
        sandbox="local",
        trials_dir=out / "trials",
        run_id=f"bench{concurrency}",
    )
    rollouts_per_host = args.rollouts_per_host or max(8, math.ceil(concurrency / args.max_hosts))
    config = SweepConfig(
        out=out,
        concurrency=concurrency,
        rollouts_per_host=rollouts_per_host,
        proxy=proxy,
        retries=0,
        commit_every_s=args.commit_every_s,
    )
    cpu: dict[str, float] = {}
    tree: dict[str, dict[int, tuple[str, float]]] = {}
    hosts: list[int] = []
    threads: dict[str, dict[str, float]] = {}
    # Kept after the run (the output directory is not), named in the output.
    profiler = (
        Profiler(args.py_spy, Path(tempfile.mkdtemp(prefix="hr-bench-profiles-")))
        if args.py_spy
        else None
    )

    def on_stats(stats) -> None:
        # From the first wave's end (the hosts are up and warm: their start-up is not a
        # rollout's cost) to the last row (before the hosts are shut down: their CPU
        # would go with them).
        if stats.done == concurrency and "start" not in tree:
            tree["start"] = tree_cpu_s(os.getpid(), engine_pid)
            hosts[:] = [pid for pid, (name, _) in tree["start"].items() if name == "hosts"]
            threads["start"] = threads_cpu_s(hosts)
            cpu["start_t"] = time.perf_counter()
            if args.cpu_netns:
                cpu["start"] = netns_cpu_s(args.cpu_netns)
            if profiler is not None:
                profiler.start(tree["start"])
        if stats.done == stats.total and "end" not in tree:
            tree["end"] = tree_cpu_s(os.getpid(), engine_pid)
            threads["end"] = threads_cpu_s(hosts)
            cpu["end_t"] = time.perf_counter()
            if args.cpu_netns:
                cpu["end"] = netns_cpu_s(args.cpu_netns)
            if profiler is not None:
                profiler.stop()

    started = time.perf_counter()
    wall_start = time.time()
    stats = await sweep(
        specs, config, {}, work=chat_agent(args.calls, args.think), on_stats=on_stats
    )
    wall = time.perf_counter() - started
    # The calls of the rollouts that ended in between (those in flight at either end
    # roughly cancel out).
    cpu_ms = (
        1e3 * (cpu["end"] - cpu["start"]) / ((count - concurrency) * args.calls)
        if "start" in cpu and "end" in cpu and count > concurrency
        else float("nan")
    )
    # The same window, by process class, per rollout that ended in it.
    steady = count - concurrency
    by_class = (
        {name: 1e3 * s / steady for name, s in cpu_by_class(tree["start"], tree["end"]).items()}
        if "end" in tree and steady > 0
        else {}
    )
    window_s = cpu.get("end_t", 0.0) - cpu.get("start_t", 0.0)
    by_thread = (
        {
            name: 1e3 * (used - threads["start"].get(name, 0.0)) / steady
            for name, used in threads["end"].items()
        }
        if "end" in threads and steady > 0
        else {}
    )
    return {
        "concurrency": concurrency,
        "rollouts": count,
        "ok": stats.ok,
        "cluster_cpu_ms_per_call": cpu_ms,
        "cpu_ms_per_rollout": by_class,
        "host_thread_ms_per_rollout": by_thread,
        "steady_window_s": window_s,
        "load": os.getloadavg(),
        "profiles": None if profiler is None else profiler.summaries(),
        "hosts": math.ceil(concurrency / rollouts_per_host),
        "peak": stats.peak_in_flight,
        "wall_s": wall,
        "per_min": 60 * count / wall,
        "calls_per_s": count * args.calls / wall,
        "errors": dict(stats.by_error),
        **breakdown(out, wall_start, wall, concurrency, stats.write_s),
    }


def breakdown(
    out: Path, wall_start: float, wall: float, concurrency: int, write_s: float
) -> dict[str, float]:
    """Where the wall time went, from the rows' own marks (the stub agent's) and the
    commit times of their parts."""
    rows = pq.read_table(out / "rollouts", columns=["rollout_id", "timings"]).to_pylist()
    marks = [dict(r["timings"]) for r in rows]
    starts = sorted(m["started_at"] - wall_start for m in marks)
    committed = {}
    for part in (out / "rollouts").glob("part-*.parquet"):
        for rid in pq.read_table(part, columns=["rollout_id"])["rollout_id"].to_pylist():
            committed[rid] = part.stat().st_mtime
    lag = [committed[r["rollout_id"]] - m["ended_at"] for r, m in zip(rows, marks, strict=True)]
    startup = starts[min(concurrency, len(starts)) - 1]  # until every slot had begun once
    work = statistics.median(m["total"] for m in marks)
    after = wall - startup
    ended_after = sum(1 for m in marks if m["ended_at"] - wall_start >= startup)
    return {
        "first_work_s": starts[0],
        "startup_s": startup,
        "open_ms": 1e3 * statistics.median(m["open"] for m in marks),
        "calls_s": statistics.median(m["calls"] for m in marks),
        "close_ms": 1e3 * statistics.median(m["close"] for m in marks),
        "last_start_s": starts[-1],
        "last_end_s": max(m["ended_at"] for m in marks) - wall_start,
        "work_s": work,
        "return_to_commit_ms": 1e3 * statistics.median(lag),
        "write_ms_per_rollout": 1e3 * write_s / len(rows),
        "after_startup_per_min": 60 * ended_after / max(after, 1e-9),
        "ideal_per_min": concurrency * 60 / work,
    }


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """The stub agent's rollout and the stub engine, as the sweep and online benchmarks
    both run them."""
    parser.add_argument("--calls", type=int, default=3, help="model calls per rollout")
    parser.add_argument(
        "--think", type=float, default=0.5, help="seconds the stub agent waits between calls"
    )
    parser.add_argument("--delay-ms", type=float, default=50.0, help="stub engine latency")
    parser.add_argument("--replicas", type=int, default=2, help="capture proxy replicas")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--waves", type=int, default=3, help="rollouts = waves x concurrency")
    add_workload_args(parser)
    parser.add_argument(
        "--ingress",
        choices=get_args(Ingress),
        default="direct",
        help="agents reach the replicas via their host's relay or Serve, "
        "or the hosts serve the proxy themselves (no replicas)",
    )
    parser.add_argument(
        "--per-host",
        dest="rollouts_per_host",
        type=int,
        default=None,
        help="rollouts per host (default: enough for --max-hosts hosts)",
    )
    parser.add_argument("--max-hosts", type=int, default=20)
    parser.add_argument(
        "--commit-s",
        dest="commit_every_s",
        type=float,
        default=SweepConfig.commit_every_s,
        help="seconds between the driver's commits (0: one per rollout)",
    )
    parser.add_argument("--ray-address", default=None)
    parser.add_argument(
        "--llm-url", default=None, help="an engine already running (default: start the stub engine)"
    )
    parser.add_argument(
        "--netns-nodes",
        type=int,
        default=None,
        help="run on a cluster of this many namespaced nodes (root)",
    )
    parser.add_argument(
        "--py-spy",
        default=None,
        metavar="PATH",
        help="py-spy's executable: profile one host, the driver and the "
        "stub engine over the steady state and print their hottest "
        "functions",
    )
    parser.add_argument("--cpu-netns", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.netns_nodes is not None:
        return on_netns_cluster(args.netns_nodes, args.delay_ms)
    set_switches()  # before Ray starts

    temp_dir = None
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        temp_dir = tempfile.mkdtemp(prefix="hr-bench-", dir="/tmp")
        ray.init(_temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    engine, llm_url = (None, args.llm_url) if args.llm_url else start_engine(args.delay_ms)
    rows = []
    proxy = None
    try:
        served_model = asyncio.run(certified_model(llm_url))
        proxy = start_capture_proxy(
            llm_url, served_model, ingress=args.ingress, replicas=args.replicas
        )
        with tempfile.TemporaryDirectory(prefix="hr-bench-out-") as out_root:
            for concurrency in args.concurrency:
                row = asyncio.run(
                    one_level(
                        concurrency,
                        args,
                        proxy,
                        Path(out_root),
                        None if engine is None else engine.pid,
                    )
                )
                rows.append(row)
                print(f"c={concurrency}: {row}", flush=True)
    finally:
        if proxy is not None:
            stop_capture_proxy(proxy)
        if engine is not None:
            engine.terminate()
        ray.shutdown()
    print(
        f"\n{args.calls} calls per rollout, {args.think:g} s think time, stub engine "
        f"{args.delay_ms:g} ms, {args.replicas} proxy replicas ({args.ingress} ingress), "
        f"{args.waves} waves, a commit every {args.commit_every_s:g} s"
    )
    # A level's own work time stretches when the machine is the limit, which flatters its
    # ratio; the first (least concurrent) level's work is the rollout's unstretched time.
    quiet = rows[0]
    print(
        "| concurrency | rollouts | ok | hosts | peak in flight | wall s | rollouts/min "
        "| model calls/s | host start-up s | after start-up /min | C x 60 / work s "
        f"| ratio (target >= 0.5) | ratio, work as at c={quiet['concurrency']} |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["after_startup_per_min"] / r["ideal_per_min"]
        unstretched = r["after_startup_per_min"] * quiet["work_s"] / (r["concurrency"] * 60)
        print(
            f"| {r['concurrency']} | {r['rollouts']} | {r['ok']} | {r['hosts']} | "
            f"{r['peak']} | {r['wall_s']:.1f} | {r['per_min']:.0f} | "
            f"{r['calls_per_s']:.1f} | {r['startup_s']:.1f} | "
            f"{r['after_startup_per_min']:.0f} | {r['ideal_per_min']:.0f} | {ratio:.2f} | "
            f"{unstretched:.2f} |"
        )
    if args.cpu_netns:
        print(
            "\ncluster CPU per model call (every process of the nodes, the stub agents "
            "included, not the engine): "
            + ", ".join(
                f"c={r['concurrency']}: {r['cluster_cpu_ms_per_call']:.2f} ms" for r in rows
            )
        )
    print(
        "\nper rollout, medians: | concurrency | session open ms | the work s | session "
        "close ms | return to commit ms | writer ms |"
    )
    for r in rows:
        print(
            f"| {r['concurrency']} | {r['open_ms']:.2f} | {r['work_s']:.2f} | "
            f"{r['close_ms']:.2f} | {r['return_to_commit_ms']:.0f} | "
            f"{r['write_ms_per_rollout']:.2f} |"
        )
    print(
        "\nCPU ms per rollout by process class, from the first wave's end to the last row "
        "(/proc; the load average at the level's end):"
    )
    classes = ranked(rows, "cpu_ms_per_rollout")
    print("| concurrency | window s | " + " | ".join(classes) + " | all | load 1/5 min |")
    print("|---|---|" + "---|" * (len(classes) + 2))
    for r in rows:
        used = r["cpu_ms_per_rollout"]
        print(
            f"| {r['concurrency']} | {r['steady_window_s']:.1f} | "
            + " | ".join(f"{used.get(c, 0.0):.1f}" for c in classes)
            + f" | {sum(used.values()):.1f} | {r['load'][0]:.1f} / {r['load'][1]:.1f} |"
        )
    host_threads(rows)
    cpu_limits(rows, quiet)
    for r in rows:
        for name, summary in (r["profiles"] or {}).items():
            print(f"\nc={r['concurrency']} {name}: {summary}")


def ranked(rows: list[dict[str, Any]], key: str) -> list[str]:
    """The names in the rows' `key` tables, the largest value in any row first."""
    return sorted(
        {n for r in rows for n in r[key]}, key=lambda n: -max(r[key].get(n, 0.0) for r in rows)
    )


def host_threads(rows: list[dict[str, Any]], top: int = 6) -> None:
    """The hosts' CPU by thread, the same window: the asyncio loop that runs the rollouts,
    the capture app and the encoding, against Ray's own (the main thread that takes and
    returns the `run` calls, and its gRPC and event threads)."""
    names = ranked(rows, "host_thread_ms_per_rollout")[:top]
    print(
        "\nhosts' CPU ms per rollout by thread (/proc comm names: Ray names the asyncio "
        "loop's thread as the worker was when it started it, often ray::IDLE, and the "
        "main thread after the actor's class):"
    )
    print("| concurrency | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        used = r["host_thread_ms_per_rollout"]
        print(
            f"| {r['concurrency']} | " + " | ".join(f"{used.get(n, 0.0):.2f}" for n in names) + " |"
        )


# What runs once per cluster whatever its size: the sweep driver and Ray's GCS. Hosts,
# their stub agents, raylets and the engine are per node (or off the cluster).
CENTRAL = ("driver", "gcs_server")


def cpu_limits(rows: list[dict[str, Any]], quiet: dict[str, Any]) -> None:
    """What the target rate at the least concurrent level's work time asks of the CPU:
    the cores it needs at each level's measured CPU per rollout, against this machine's;
    and the rate a cluster's central processes would allow on one core between them
    (a bound: each has its own process, and could have its own core)."""
    cores = os.cpu_count() or 1
    print(
        f"\nthe CPU the target asks (0.5 x C x 60 / {quiet['work_s']:.2f} s, the work as at "
        f"c={quiet['concurrency']}), against this machine's {cores} cores; and the rate "
        f"the central processes ({', '.join(CENTRAL)}) cap a cluster at, on one core "
        "between them:"
    )
    print(
        "| concurrency | target /min | CPU ms per rollout, all | cores the target needs "
        "| central ms per rollout | central cap /min | cap / (C x 60 / work) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        used = r["cpu_ms_per_rollout"]
        if not used:
            continue
        ideal = r["concurrency"] * 60 / quiet["work_s"]
        total = sum(used.values())
        central = sum(used.get(c, 0.0) for c in CENTRAL)
        cap = 60_000 / max(central, 1e-9)
        print(
            f"| {r['concurrency']} | {0.5 * ideal:.0f} | {total:.1f} | "
            f"{0.5 * ideal / 60 * total / 1e3:.1f} | {central:.1f} | "
            f"{cap:.0f} | {cap / ideal:.2f} |"
        )


def on_netns_cluster(nodes: int, delay_ms: float) -> None:
    """This script again, inside the head's namespace of a cluster of `nodes` namespaced
    nodes, against the stub engine in a namespace of its own."""
    from tests.fixtures.multinode import netns_cluster

    forwarded = _without_option(sys.argv[1:], "--netns-nodes")
    with netns_cluster(nodes - 1) as cluster:
        engine_node = cluster.add_namespace("engine")
        url = f"http://{engine_node.ip}:8011/v1"
        cluster.popen(
            engine_node,
            [
                sys.executable,
                "-m",
                "harbor_ray.capture.proxy.fake_engine",
                "--host",
                engine_node.ip,
                "--port",
                "8011",
                "--delay-ms",
                str(delay_ms),
            ],
        )
        ray_nodes = [n.netns for n in cluster.nodes.values() if n.ray is not None]
        print(
            f"{nodes} namespaced nodes: {', '.join(n.ip for n in cluster.nodes.values())}",
            flush=True,
        )
        inner = cluster.popen(
            cluster.head,
            [
                sys.executable,
                __file__,
                *forwarded,
                "--ray-address",
                cluster.address,
                "--llm-url",
                url,
                "--cpu-netns",
                *ray_nodes,
            ],
            cwd=Path(__file__).parents[1],
        )
        inner.wait()


def _without_option(argv: list[str], name: str) -> list[str]:
    """`argv` without `name` and its value."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(f"{name}="):
            out.append(arg)
    return out


if __name__ == "__main__":
    main()
