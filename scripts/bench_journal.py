"""What a host's turn journal costs a model call: latency p50/p99 through the capture
proxy with the journal off, flushed (`write`) and fsynced, from one run; and the
append alone (encode, write, sync) of a turn with a `--prompt-tokens` prompt, which a
loaded machine's noise in the end-to-end figures does not hide.

The stub engine runs in its own process; the proxy (with a session store journaling
as a rollout host's does) and this load generator share this process, as a host's
proxy and its agents' calls share its node. Modes alternate round by round, so drift
in the machine's load falls on all of them alike. The journal goes to `--dir` (default:
a temporary directory under the current one, on the disk a run's OUT would use; /tmp
may be memory, where fsync costs nothing).

    .venv/bin/python scripts/bench_journal.py [--calls 400] [--concurrency 1 16] \
        [--rounds 3] [--prompt-tokens 8000] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
from bench_proxy import PROMPT, free_port, run_engine, wait_up

from harbor_ray.capture.core.journal import JournalMode, Recorded, encode_entry
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.journal_file import JournalFile
from harbor_ray.capture.proxy.local import serve_capture
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import HttpEngine

MODES: tuple[JournalMode, ...] = ("off", "flush", "fsync")


async def one_mode(
    engine_url: str, mode: JournalMode, directory: Path, calls: int, concurrency: int
) -> list[float]:
    """Seconds per call, `calls` calls from `concurrency` agents, each its own session."""
    journal = None if mode == "off" else JournalFile(directory / f"{mode}.journal", mode)
    store = InMemorySessionStore(owner="bench", journal=journal)
    engine = HttpEngine(engine_url)
    latencies: list[float] = []
    try:
        async with (
            serve_capture(store, engine, "fake-model") as capture,
            aiohttp.ClientSession() as http,
        ):
            url = f"{capture.host_url}/v1/chat/completions"
            body = {"model": "fake-model", "messages": PROMPT, "max_tokens": 16}

            async def agent(share: int) -> None:
                session = await capture.open_session(budget=None, sampling=None)
                headers = {"authorization": f"Bearer {session.key}"}
                for _ in range(share):
                    start = time.perf_counter()
                    async with http.post(url, json=body, headers=headers) as reply:
                        await reply.read()
                        assert reply.status == 200, reply.status
                    latencies.append(time.perf_counter() - start)
                await capture.close_session(session.session_id)

            await asyncio.gather(*(agent(calls // concurrency) for _ in range(concurrency)))
    finally:
        await engine.aclose()
        if journal is not None:
            journal.close()
            journal.path.unlink()
    return latencies


async def appends(mode: JournalMode, directory: Path, prompt_tokens: int, n: int) -> list[float]:
    """Seconds per `append` of one turn (the store's whole cost per recorded call)."""
    if mode == "off":
        return []
    journal = JournalFile(directory / f"append-{mode}.journal", mode)
    entry = Recorded("bench.s", _turn(prompt_tokens))
    seconds = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            await journal.append(entry)
            seconds.append(time.perf_counter() - start)
    finally:
        journal.close()
        journal.path.unlink()
    return seconds


def _turn(prompt_tokens: int) -> TurnRecord:
    rng = np.random.default_rng(0)
    return TurnRecord(
        index=0,
        dialect="chat",
        finish_reason="stop",
        prompt_ids=rng.integers(0, 50_000, prompt_tokens, dtype=np.int32),
        token_ids=rng.integers(0, 50_000, 256, dtype=np.int32),
        logprobs=rng.random(256, dtype=np.float32),
        request_messages_json=b"[" + b'{"role":"user","content":"x"},' * 200 + b"{}]",
    )


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def bench(
    calls: int, concurrencies: list[int], rounds: int, directory: Path, prompt_tokens: int
) -> None:
    port = free_port()
    engine = mp.get_context("spawn").Process(target=run_engine, args=(port, 0.0), daemon=True)
    engine.start()
    engine_url = f"http://127.0.0.1:{port}"
    try:
        await wait_up(engine_url)
        await one_mode(engine_url, "off", directory, 50, 1)  # warm-up, not counted
        print(
            f"load average {os.getloadavg()[0]:.2f} at the start; {calls} calls a mode a "
            f"round, {rounds} rounds, journal in {directory}"
        )
        for concurrency in concurrencies:
            seen: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(rounds):
                for mode in MODES:
                    seen[mode] += await one_mode(engine_url, mode, directory, calls, concurrency)
            base50, base99 = quantile(seen["off"], 0.5), quantile(seen["off"], 0.99)
            print(f"\nconcurrency {concurrency}")
            print(
                f"{'mode':>6} {'p50 ms':>8} {'p99 ms':>8} {'p50 +ms':>8} {'p99 +ms':>8} "
                f"{'p50 x':>6} {'p99 x':>6}"
            )
            for mode in MODES:
                p50, p99 = quantile(seen[mode], 0.5), quantile(seen[mode], 0.99)
                print(
                    f"{mode:>6} {p50 * 1e3:8.2f} {p99 * 1e3:8.2f} "
                    f"{(p50 - base50) * 1e3:8.2f} {(p99 - base99) * 1e3:8.2f} "
                    f"{p50 / base50:6.2f} {p99 / base99:6.2f}"
                )
        size = len(encode_entry(Recorded("bench.s", _turn(prompt_tokens))))
        print(
            f"\nappend alone: one turn of {prompt_tokens} prompt + 256 sampled ids "
            f"({size / 1e3:.0f} kB a record), {calls * rounds} appends"
        )
        print(f"{'mode':>6} {'p50 ms':>8} {'p99 ms':>8}")
        for mode in MODES[1:]:
            seen_append = await appends(mode, directory, prompt_tokens, calls * rounds)
            print(
                f"{mode:>6} {quantile(seen_append, 0.5) * 1e3:8.3f} "
                f"{quantile(seen_append, 0.99) * 1e3:8.3f}"
            )
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    finally:
        engine.terminate()
        engine.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls a mode a round")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 16],
        help="agents calling at once (each its own session)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all modes")
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=8000,
        help="the prompt of the turn the append figures journal",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the journals go (default: a temporary directory here)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or Path.cwd(), prefix=".bench-journal-") as d:
        asyncio.run(bench(args.calls, args.concurrency, args.rounds, Path(d), args.prompt_tokens))


if __name__ == "__main__":
    main()
