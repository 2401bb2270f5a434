"""The real engine's cost, and the capture proxy's share of it, in one run.

Prints: the engine's start-up time (when this script starts it), SmolLM2's tokens/s and
per-request latency called directly and through the capture proxy at 1, 8 and 32
concurrent requests (the ratio is the proxy's cost), and the peak resident memory of
the engine's processes while it worked.

    uv run python scripts/bench_engine.py                  # starts the engine itself
    uv run python scripts/bench_engine.py --llm-url URL    # an engine already running
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from pathlib import Path

import aiohttp

from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
ROOT = Path(__file__).resolve().parents[1]


def engine_rss_bytes() -> int:
    """Resident memory of every Ray and vLLM process on this machine (the engine's tree)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"ray" not in cmdline and b"VLLM" not in cmdline and b"vllm" not in cmdline:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


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


async def load(url: str, key: str | None, concurrency: int, requests: int,
               body: dict) -> tuple[float, float, float]:
    """(tokens/s, p50 latency s, p99-ish max latency s) for `requests` calls."""
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
                async with client.post(f"{url}/v1/chat/completions", json=body,
                                       headers=headers) as resp:
                    reply = await resp.json()
                    resp.raise_for_status()
                latencies.append(time.perf_counter() - start)
                tokens += reply["usage"]["completion_tokens"]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return tokens / elapsed, statistics.median(latencies), max(latencies)


async def bench(llm_url: str, concurrencies: list[int], max_tokens: int, rounds: int) -> None:
    engine = HttpEngine(llm_url)
    body = {"model": "x", "messages": PROMPT, "max_tokens": max_tokens, "temperature": 1.0,
            # Every reply is exactly max_tokens long, so runs compare like for like.
            "ignore_eos": True}
    direct_body = {**body, "return_token_ids": True, "logprobs": True}
    try:
        async with local_capture(engine, engine.root) as capture:
            direct_body["model"] = capture.served_model
            print(f"model {capture.served_model}; {max_tokens}-token replies; "
                  f"{rounds} request(s) per client")
            print(f"{'conc':>4} | {'direct tok/s':>12} {'p50 s':>6} {'max s':>6} | "
                  f"{'proxy tok/s':>11} {'p50 s':>6} {'max s':>6} | {'tok/s ratio':>11} "
                  f"{'p50 ratio':>9}")
            with PeakMemory() as memory:
                for c in concurrencies:
                    n = c * rounds
                    d = await load(engine.root, None, c, n, direct_body)
                    key = (await capture.open_session(budget=None, sampling=None)).key
                    p = await load(capture.host_url, key, c, n, body)
                    print(f"{c:>4} | {d[0]:12.1f} {d[1]:6.2f} {d[2]:6.2f} | {p[0]:11.1f} "
                          f"{p[1]:6.2f} {p[2]:6.2f} | {p[0] / d[0]:11.3f} {p[1] / d[1]:9.3f}")
            print(f"peak resident memory of Ray + vLLM processes: {memory.peak / 2**30:.2f} GiB")
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm-url", help="an engine already running (skips start-up)")
    parser.add_argument("--config", type=Path, default=ROOT / "serve_configs/engine_cpu.yaml",
                        help="Serve YAML to start the engine from")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client")
    args = parser.parse_args()
    url = args.llm_url
    handle = None
    if url is None:
        from harbor_ray.engine.lifecycle import engine_up

        started = time.perf_counter()
        with PeakMemory() as memory:
            handle = engine_up(args.config, progress=lambda m: print(f"  {m}", flush=True))
        print(f"engine start-up: {time.perf_counter() - started:.0f} s "
              f"(peak memory while starting {memory.peak / 2**30:.2f} GiB)")
        url = handle.url
    try:
        asyncio.run(bench(url, args.concurrency, args.max_tokens, args.rounds))
    finally:
        if handle is not None:
            from harbor_ray.engine.lifecycle import engine_down

            engine_down(handle.app_name)


if __name__ == "__main__":
    main()
