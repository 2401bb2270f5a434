"""The real engine's cost, and the capture proxy's share of it, in one run.

Prints: the engine's start-up time (when this script starts it) and where it went, as
the processes' own log lines tell it (the driver's part, each of the replica's,
EngineCore's and the worker's process start with its imports, the weights, the warm-up
with torch.compile or its cache, the KV cache, Serve's health check), what became of
vLLM's compile cache, and the CPU seconds vLLM's processes and the Serve replicas spent
starting; SmolLM2's tokens/s and per-request latency called directly and through the
capture proxy at 1, 8 and 32 concurrent requests (the ratio is the proxy's cost), and
the peak resident memory of the engine's processes while it worked. With
`--baseline OLD.yaml` it first starts and measures OLD the same way, then prints the
new config's start-up (wall and CPU) and direct tokens/s as ratios to OLD's.

    .venv/bin/python scripts/bench_engine.py                  # starts the engine itself
    .venv/bin/python scripts/bench_engine.py --baseline OLD.yaml --address auto --port 8140
    .venv/bin/python scripts/bench_engine.py --llm-url URL    # an engine already running
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import _procfs as procfs
import aiohttp

from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.switches import set_switches

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
ROOT = Path(__file__).resolve().parents[1]


def engine_rss_bytes() -> int:
    """Resident memory of every Ray and vLLM process on this machine (the engine's tree)."""
    total = 0
    for pid in procfs.pids():
        cmdline = procfs.cmdline(pid) or b""
        if b"ray" not in cmdline and b"VLLM" not in cmdline and b"vllm" not in cmdline:
            continue
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


VLLM_PROCESSES = (b"VLLM::",)
"""Command-line prefixes of vLLM's own processes (EngineCore, its workers)."""
REPLICA_PROCESSES = (b"ray::ServeReplica:",)
"""The Serve replicas around them (the LLM server that owns the engine, the ingress)."""


def cpu_seconds(gcs_address: str, prefixes: tuple[bytes, ...] = VLLM_PROCESSES) -> float:
    """CPU seconds used so far by the processes of the Ray cluster at `gcs_address`
    whose command line starts with one of `prefixes`: the raylet's descendants only,
    whatever else runs on this machine."""
    stats = procfs.snapshot()
    titles = {pid: title for pid in stats if (title := procfs.cmdline(pid)) is not None}
    raylets = {
        pid
        for pid, title in titles.items()
        if b"raylet" in title and f"--gcs-address={gcs_address}".encode() in title
    }
    seconds = 0.0
    for pid, title in titles.items():
        if not title.startswith(prefixes):
            continue
        ancestor = procfs.parent(stats[pid])
        while ancestor in stats and ancestor not in raylets:
            ancestor = procfs.parent(stats[ancestor])
        if ancestor in raylets:
            seconds += procfs.cpu_s(stats[pid])
    return seconds


class PeakMemory:
    """Samples engine_rss_bytes() in a thread while the load runs."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, engine_rss_bytes())
            self._stop.wait(every_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def load(
    url: str, key: str | None, concurrency: int, requests: int, body: dict
) -> tuple[float, float, float, float]:
    """(tokens/s, p50 latency s, max latency s, seconds in all) for `requests` calls."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    latencies: list[float] = []
    tokens = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as client:

        async def worker() -> None:
            nonlocal tokens
            while not queue.empty():
                queue.get_nowait()
                start = time.perf_counter()
                async with client.post(
                    f"{url}/v1/chat/completions", json=body, headers=headers
                ) as resp:
                    reply = await resp.json()
                    resp.raise_for_status()
                latencies.append(time.perf_counter() - start)
                tokens += reply["usage"]["completion_tokens"]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return tokens / elapsed, statistics.median(latencies), max(latencies), elapsed


# vLLM's own timings of the start-up phases it knows (first number of each line).
_PHASES = {
    "weights": re.compile(r"Loading weights took ([\d.]+) s"),
    "engine init (profile, KV cache, warm-up)": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"
    ),
}

# The milestones of a start, in the order they happen, from the processes' own log
# lines (Serve's carry the year, vLLM's do not); a phase runs from the milestone seen
# before it. Which process imports what is what the breakdown is for: each of the
# replica, EngineCore and the worker imports torch and vLLM before it logs anything.
_SERVE_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
_VLLM_TIME = r"(\d\d-\d\d \d\d:\d\d:\d\d) \[[\w.]+:\d+\]"
_MILESTONES = (
    (
        "driver: model prepared, app built, Serve started",
        re.compile(_SERVE_TIME + r" controller \d+ -- Deploying new version of Deployment"),
    ),
    (
        "replica scheduled, its process up, vLLM imported",
        re.compile(_SERVE_TIME + r" \S*Server:\S+ \S+ -- Started initializing replica"),
    ),
    (
        "EngineCore's process up, vLLM imported",
        re.compile(_VLLM_TIME + r" Initializing a V1 LLM engine"),
    ),
    ("the worker's process up, vLLM imported", re.compile(_VLLM_TIME + r" Starting to load model")),
    ("weights", re.compile(_VLLM_TIME + r" Loading weights took")),
    ("to the warm-up", re.compile(_VLLM_TIME + r" Warming up model for the compilation")),
    ("warm-up: torch.compile, or loading its cache", re.compile(_VLLM_TIME + r" Warming up done")),
    ("KV cache, the server's state", re.compile(_SERVE_TIME + r" \S+ \S+ -- Started vLLM engine")),
)
_READY = "Serve: replica healthy, routes updated, /v1/models answers"

# What became of vLLM's AOT compile cache, by its log lines. With VLLM_USE_AOT_COMPILE=0
# (engine_cpu.yaml) Inductor's own caches serve instead and log nothing: the warm-up's
# length tells a hit (seconds) from a compile (minutes).
_COMPILE_CACHE = (
    ("loaded", re.compile(r"Directly load AOT compilation from path")),
    ("load failed, compiled again", re.compile(r"Compiling model again due to a load failure")),
    ("compiled and saved", re.compile(r"saved AOT compiled function")),
)


def startup_phases(log_text: str) -> dict[str, float]:
    """Seconds of each phase vLLM logged (the last such line: one engine per run)."""
    phases = {}
    for name, pattern in _PHASES.items():
        if found := pattern.findall(log_text):
            phases[name] = float(found[-1])
    return phases


def _stamp(text: str, year: int) -> float:
    if len(text) == len("12-01 20:19:27"):  # vLLM's: no year, no fraction
        text = f"{year}-{text},000"
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def startup_timeline(log_text: str, started: float, ready: float) -> list[tuple[str, float]]:
    """(phase, seconds) from `started` to `ready` (wall clock), split at each
    milestone the logs show (the first of each kind); a missing one merges its phase
    into the next."""
    year = datetime.fromtimestamp(started).year
    seen = sorted(
        (_stamp(found.group(1), year), name)
        for name, pattern in _MILESTONES
        if (found := pattern.search(log_text))
    )
    timeline, previous = [], started
    for at, name in seen:
        timeline.append((name, max(0.0, at - previous)))
        previous = max(previous, at)
    timeline.append((_READY, ready - previous))
    return timeline


def compile_cache_outcome(log_text: str) -> str:
    """What vLLM did with its compile cache: its first outcome line, in log order."""
    found = [
        (match.start(), name)
        for name, pattern in _COMPILE_CACHE
        if (match := pattern.search(log_text))
    ]
    return min(found)[1] if found else "no AOT cache lines (AOT compile off, or eager)"


class LogTail:
    """The lines Ray's session logs gained since it was made (every process's output)."""

    def __init__(self) -> None:
        import ray

        self._dir = Path(ray._private.worker._global_node.get_logs_dir_path())
        self._sizes = {path: path.stat().st_size for path in self._files()}

    def _files(self) -> list[Path]:
        return [path for path in self._dir.rglob("*") if path.suffix in (".out", ".err", ".log")]

    def new_text(self) -> str:
        parts = []
        for path in self._files():
            with path.open("rb") as file:
                file.seek(self._sizes.get(path, 0))
                parts.append(file.read().decode(errors="replace"))
        return "\n".join(parts)


@dataclass
class Run:
    """One engine config measured: its start-up, and direct tokens/s by concurrency."""

    config: Path
    startup_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    timeline: list[tuple[str, float]] = field(default_factory=list)
    compile_cache: str = ""
    # CPU seconds the start cost: vLLM's processes, and the Serve replicas around them.
    startup_cpu_s: dict[str, float] = field(default_factory=dict)
    direct_tok_s: dict[int, float] = field(default_factory=dict)
    # Tokens per CPU second of the vLLM processes: what tokens/s would be with their
    # CPU to themselves, so two configs compare even while other work shares the cores.
    tok_per_cpu_s: dict[int, float] = field(default_factory=dict)


async def bench(
    llm_url: str,
    concurrencies: list[int],
    max_tokens: int,
    rounds: int,
    run: Run,
    with_proxy: bool = True,
) -> None:
    import ray

    gcs = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    engine = HttpEngine(llm_url)
    body = {
        "model": "x",
        "messages": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        # Every reply is exactly max_tokens long, so runs compare like for like.
        "ignore_eos": True,
    }
    direct_body = {**body, "return_token_ids": True, "logprobs": True}
    try:
        async with local_capture(engine, engine.root) as capture:
            direct_body["model"] = capture.served_model
            print(
                f"model {capture.served_model}; {max_tokens}-token replies; "
                f"{rounds} request(s) per client"
            )
            print(
                f"{'conc':>4} | {'direct tok/s':>12} {'p50 s':>6} {'max s':>6} "
                f"{'tok/cpu-s':>9} | {'proxy tok/s':>11} {'p50 s':>6} {'max s':>6} | "
                f"{'tok/s ratio':>11} {'p50 ratio':>9}"
            )
            with PeakMemory() as memory:
                for c in concurrencies:
                    n = c * rounds
                    cpu = cpu_seconds(gcs) if gcs else 0.0
                    d = await load(engine.root, None, c, n, direct_body)
                    cpu = cpu_seconds(gcs) - cpu if gcs else 0.0
                    run.direct_tok_s[c] = d[0]
                    # tokens/s times the seconds of the run = the tokens sampled.
                    run.tok_per_cpu_s[c] = d[0] * d[3] / cpu if cpu else float("nan")
                    line = (
                        f"{c:>4} | {d[0]:12.1f} {d[1]:6.2f} {d[2]:6.2f} "
                        f"{run.tok_per_cpu_s[c]:9.1f} |"
                    )
                    if with_proxy:
                        key = (await capture.open_session(budget=None, sampling=None)).key
                        p = await load(capture.host_url, key, c, n, body)
                        line += (
                            f" {p[0]:11.1f} {p[1]:6.2f} {p[2]:6.2f} | {p[0] / d[0]:11.3f} "
                            f"{p[1] / d[1]:9.3f}"
                        )
                    print(line, flush=True)
            print(f"peak resident memory of Ray + vLLM processes: {memory.peak / 2**30:.2f} GiB")
    finally:
        await engine.aclose()


def start_and_bench(config: Path, args: argparse.Namespace, with_proxy: bool) -> Run:
    """Start the engine from `config`, time its start-up by phase, bench it, stop it."""
    import ray

    from harbor_ray.engine.lifecycle import engine_down, engine_up

    if not ray.is_initialized():
        ray.init(address=args.address, include_dashboard=False)
    run = Run(config)
    print(f"== {config}", flush=True)
    logs = LogTail()
    started, started_wall = time.perf_counter(), time.time()
    with PeakMemory() as memory:
        handle = engine_up(
            config,
            ray_address=args.address,
            port=args.port,
            progress=lambda m: print(f"  {m}", flush=True),
        )
    run.startup_s = time.perf_counter() - started
    gcs = ray.get_runtime_context().gcs_address
    run.startup_cpu_s = {
        "vLLM (EngineCore, worker)": cpu_seconds(gcs, VLLM_PROCESSES),
        "Serve replicas (server, ingress)": cpu_seconds(gcs, REPLICA_PROCESSES),
    }
    text = logs.new_text()
    run.phases = startup_phases(text)
    run.timeline = startup_timeline(text, started_wall, started_wall + run.startup_s)
    run.compile_cache = compile_cache_outcome(text)
    print(
        f"engine start-up: {run.startup_s:.0f} s, load {os.getloadavg()[0]:.1f} "
        f"(peak memory while starting {memory.peak / 2**30:.2f} GiB)"
    )
    for name, seconds in run.timeline:
        print(f"  {name:<58} {seconds:6.1f} s")
    print("  as vLLM timed them:")
    for name, seconds in run.phases.items():
        print(f"    {name:<56} {seconds:6.1f} s")
    print(f"  compile cache: {run.compile_cache}")
    for name, seconds in run.startup_cpu_s.items():
        print(f"  CPU seconds of {name}: {seconds:.1f}")
    try:
        asyncio.run(
            bench(handle.url, args.concurrency, args.max_tokens, args.rounds, run, with_proxy)
        )
    finally:
        engine_down(handle.app_name)
    return run


def compare(old: Run, new: Run) -> None:
    print(f"\n{new.config} against {old.config}:")
    print(
        f"  start-up {old.startup_s:.0f} s -> {new.startup_s:.0f} s "
        f"({new.startup_s / old.startup_s:.2f}x)"
    )
    for name, seconds in new.startup_cpu_s.items():
        before = old.startup_cpu_s[name]
        print(
            f"  start-up CPU seconds of {name}: {before:.1f} -> {seconds:.1f} "
            f"({seconds / before:.2f}x)"
        )
    for c, tok_s in new.direct_tok_s.items():
        before = old.direct_tok_s[c]
        print(f"  direct tok/s at {c:>2}: {before:.1f} -> {tok_s:.1f} ({tok_s / before:.3f}x)")
        per_cpu, per_cpu_before = new.tok_per_cpu_s[c], old.tok_per_cpu_s[c]
        print(
            f"  tokens per vLLM CPU second at {c:>2}: {per_cpu_before:.1f} -> {per_cpu:.1f} "
            f"({per_cpu / per_cpu_before:.3f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm-url", help="an engine already running (skips start-up)")
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "serve_configs/engine_cpu.yaml",
        help="Serve YAML to start the engine from",
    )
    parser.add_argument(
        "--baseline", type=Path, help="Serve YAML to start and measure first, as the 'before'"
    )
    parser.add_argument("--address", help="Ray cluster to start engines on (default: a local one)")
    parser.add_argument("--port", type=int, help="HTTP port instead of the YAML's")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client")
    args = parser.parse_args()
    set_switches()  # before Ray is imported (start_and_bench imports it)
    if args.llm_url is not None:
        asyncio.run(
            bench(args.llm_url, args.concurrency, args.max_tokens, args.rounds, Run(args.config))
        )
        return
    old = start_and_bench(args.baseline, args, with_proxy=False) if args.baseline else None
    new = start_and_bench(args.config, args, with_proxy=True)
    if old is not None:
        compare(old, new)


if __name__ == "__main__":
    main()
