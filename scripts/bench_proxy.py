"""What the capture proxy adds to a model call: latency (p50/p99) and throughput.

One run measures, at each concurrency, the stub engine called directly and the same
engine through the capture proxy (capture and recording on, one session per client),
alternating, and prints the figures and their ratios. The stub engine, the proxy and
this load generator each run in their own process, all on this machine's cores.

    .venv/bin/python scripts/bench_proxy.py [--concurrency 1 64 512] [--seconds 10] \
        [--think-ms 0] [--client http1]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import _procfs as procfs
import aiohttp
import orjson
import uvicorn

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine, fake_engine_app
from harbor_ray.capture.proxy.http1 import Http1Pool
from harbor_ray.capture.proxy.server import run_server, serve
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.listening import bind

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' free-port probe
from tests.fixtures.fake_engine import free_port

PROMPT = [
    {"role": "system", "content": "You are a careful coding agent. " * 20},
    {"role": "user", "content": "List the files in /app and explain each one."},
]


def run_engine(port: int, delay_s: float) -> None:
    fake = FakeEngine(delay_s=delay_s)
    uvicorn.run(
        fake_engine_app(fake), host="127.0.0.1", port=port, log_level="warning", access_log=False
    )


def run_proxy(port: int, engine_url: str) -> None:
    """The proxy as `harbor-ray proxy` serves it (its own socket, uvicorn settings)."""
    engine = HttpEngine(engine_url)
    store = InMemorySessionStore()
    app = build_capture_app(
        store,
        engine,
        CaptureSettings(served_model="fake-model"),
        admin=store,
        on_shutdown=engine.aclose,
    )
    run_server(serve(app, bind("127.0.0.1", port)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one live process."""
    fields = procfs.stat_fields(pid)
    if fields is None:
        raise RuntimeError(f"process {pid} is gone")
    return procfs.cpu_s(fields)


@dataclass(frozen=True)
class Figures:
    p50_ms: float
    p99_ms: float
    calls_per_s: float
    errors: int
    calls: int


# Direct calls ask for the same capture fields the proxy asks for upstream, so both
# paths cost the engine the same and the difference is the proxy alone.
AGENT_BODY = {"model": "m", "messages": PROMPT, "max_tokens": 64}
DIRECT_BODY = {**AGENT_BODY, "return_token_ids": True, "logprobs": True}


async def load(
    url: str,
    keys: list[str],
    seconds: float,
    body: dict,
    client: str = "http1",
    *,
    think_s: float = 0.0,
) -> Figures:
    """Each key is a session calling in a closed loop; with `think_s`, it waits about that
    long between calls (0.5-1.5x, starting at a random point of the first wait), as an
    agent does while its tools run."""
    latencies: list[float] = []
    rng = random.Random(0)
    errors = 0
    deadline = time.perf_counter() + seconds
    data = orjson.dumps(body)
    post, close = _poster(client, url, len(keys))

    async def worker(key: str) -> None:
        nonlocal errors
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        await asyncio.sleep(think_s * rng.random())
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            if await post(data, headers) != 200:
                errors += 1
            latencies.append(time.perf_counter() - start)
            if think_s:
                await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in keys))
        elapsed = time.perf_counter() - started
    finally:
        await close()
    latencies.sort()
    return Figures(
        p50_ms=1000 * statistics.median(latencies),
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        calls_per_s=len(latencies) / elapsed,
        errors=errors,
        calls=len(latencies),
    )


def _poster(
    client: str, url: str, connections: int
) -> tuple[Callable[[bytes, dict[str, str]], Awaitable[int]], Callable[[], Awaitable[None]]]:
    """POST to the chat route and return the status, with the chosen HTTP client. The
    load generator shares the cores with what it measures, so its own cost matters:
    Http1Pool uses about a quarter of aiohttp's CPU per call. Returns (post, close)."""
    if client == "http1":
        pool = Http1Pool(url, max_connections=connections)

        async def post(data: bytes, headers: dict[str, str]) -> int:
            status, _ = await pool.request("POST", "/v1/chat/completions", data, headers)
            return status

        return post, pool.aclose
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def post(data: bytes, headers: dict[str, str]) -> int:
        async with session.post(f"{url}/v1/chat/completions", data=data, headers=headers) as resp:
            await resp.read()
            return resp.status

    return post, session.close


async def mint_sessions(proxy_url: str, n: int) -> list[str]:
    async with aiohttp.ClientSession() as client:
        keys = []
        for _ in range(n):
            async with client.post(f"{proxy_url}/sessions", json={}) as resp:
                keys.append((await resp.json())["key"])
        return keys


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as client:
        for _ in range(300):
            try:
                async with client.get(f"{url}/v1/models") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def bench(
    concurrencies: list[int],
    seconds: float,
    delay_s: float,
    rounds: int,
    client: str,
    think_s: float,
) -> None:
    engine_port, proxy_port = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=run_engine, args=(engine_port, delay_s), daemon=True),
        ctx.Process(target=run_proxy, args=(proxy_port, engine_url), daemon=True),
    ]
    for p in procs:
        p.start()
    try:
        await wait_up(engine_url)
        await wait_up(proxy_url)
        keys = await mint_sessions(proxy_url, max(concurrencies))
        print(
            f"stub engine answers after {delay_s * 1000:.0f} ms; {seconds:.0f} s per "
            f"measurement; {rounds} round(s), alternating direct/proxy; medians shown; "
            f"load generator's client: {client}; think time between a session's calls: "
            f"{think_s * 1000:g} ms"
        )
        header = (
            f"{'conc':>5} | {'direct p50/p99 ms':>18} {'calls/s':>8} | "
            f"{'proxy p50/p99 ms':>18} {'calls/s':>8} | {'added p50/p99 ms':>17} | "
            f"{'p99 ratio':>9} {'thru ratio':>10} | proxy CPU ms/call | errors"
        )
        print(header)
        print("-" * len(header))
        for c in concurrencies:
            direct_runs, proxy_runs, cpu_per_call = [], [], []
            for _ in range(rounds):
                direct_runs.append(
                    await load(engine_url, keys[:c], seconds, DIRECT_BODY, client, think_s=think_s)
                )
                before = cpu_seconds(procs[1].pid)
                proxy_runs.append(
                    await load(proxy_url, keys[:c], seconds, AGENT_BODY, client, think_s=think_s)
                )
                cpu = cpu_seconds(procs[1].pid) - before
                cpu_per_call.append(1000 * cpu / max(1, proxy_runs[-1].calls))
            d, p = _median(direct_runs), _median(proxy_runs)
            print(
                f"{c:>5} | {d.p50_ms:8.1f} / {d.p99_ms:7.1f} {d.calls_per_s:8.0f} | "
                f"{p.p50_ms:8.1f} / {p.p99_ms:7.1f} {p.calls_per_s:8.0f} | "
                f"{p.p50_ms - d.p50_ms:7.1f} / {p.p99_ms - d.p99_ms:7.1f} | "
                f"{p.p99_ms / d.p99_ms:9.2f} {p.calls_per_s / d.calls_per_s:10.2f} | "
                f"{statistics.median(cpu_per_call):17.2f} | {d.errors + p.errors}"
            )
    finally:
        for p in procs:
            p.terminate()
            p.join(5)


def _median(runs: list[Figures]) -> Figures:
    return Figures(
        p50_ms=statistics.median(r.p50_ms for r in runs),
        p99_ms=statistics.median(r.p99_ms for r in runs),
        calls_per_s=statistics.median(r.calls_per_s for r in runs),
        errors=sum(r.errors for r in runs),
        calls=sum(r.calls for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 64, 512],
        help="closed-loop clients (one session each) per measurement",
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
    parser.add_argument(
        "--client",
        choices=["http1", "aiohttp"],
        default="http1",
        help="the load generator's HTTP client (it shares the cores with "
        "the engine and the proxy; http1 costs it the least)",
    )
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="a session's wait between calls (its tools running); 0, the "
        "default, saturates the machine, which measures throughput; "
        "e.g. 1000 at 512 sessions measures what the proxy adds to a "
        "call when the cores are not all busy",
    )
    args = parser.parse_args()
    run_server(
        bench(
            args.concurrency,
            args.seconds,
            args.engine_delay_ms / 1000,
            args.rounds,
            args.client,
            args.think_ms / 1000,
        )
    )


if __name__ == "__main__":
    main()
