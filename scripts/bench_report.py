"""What the report costs on a large dataset: its size, its build time, its render time.

Generates a dataset of `--rollouts` rollouts (default 1,000) over 20 tasks, each a
linear agent loop of `--turns` chat calls: a `--system`-token first prompt, then each
call's prompt grows by a tool result of `--growth` tokens and samples `--reply` tokens
with logprobs (1% NaN); a tenth of the rollouts fail (no reward); the first rollout
runs `--long-turns` calls (default 200). Each request carries the whole conversation as
messages, as agents send it. Then measures:
  - `harbor-ray report`'s work (read the committed rows, plots, traces, page), and the
    page's size, with plotly.js's share and the token text's (the pieces table of the
    distinct ids, decoded with `--tokenizer`: default, the default model's when it is
    prepared here; the random ids cover most of its vocabulary, a worst case);
  - headless Chromium (Debian's /usr/bin/chromium): time to the load event, and to the
    end of the first full draw (every plot and the rollout list); then the time to draw
    one rollout's trace after a click;
  - the long rollout's trace, as token text and as ids: the time from the click to the
    next frame and the longest task the page ran (Long Tasks API: over 50 ms blocks
    input), the freeze a person would feel.

    .venv/bin/python scripts/bench_report.py [--rollouts 1000] [--long-turns 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' Chromium driver (tests/report/browser.py)

from harbor_ray.capture.core.record import close_capture  # noqa: E402
from harbor_ray.capture.core.turn import TurnRecord  # noqa: E402
from harbor_ray.data.encode import encode_record  # noqa: E402
from harbor_ray.data.result import ErrorType, RolloutResult  # noqa: E402
from harbor_ray.data.writer import DatasetWriter  # noqa: E402
from harbor_ray.report import write_report  # noqa: E402
from harbor_ray.switches import set_switches  # noqa: E402

VOCAB = 49_152
TASKS = 20
WORDS = ("the", "file", "was", "written", "and", "test", "passed", "after", "command", "ran")


def _text(rng: np.random.Generator, words: int) -> str:
    return " ".join(rng.choice(WORDS, words))


def synthetic_turns(
    rng: np.random.Generator, turns: int, system: int, growth: int, reply: int
) -> list[TurnRecord]:
    prompt = rng.integers(0, VOCAB, system, dtype=np.int32)
    messages: list[dict] = [
        {"role": "system", "content": _text(rng, system // 2)},
        {"role": "user", "content": _text(rng, 40)},
    ]
    out = []
    for index in range(turns):
        sampled = rng.integers(0, VOCAB, reply, dtype=np.int32)
        logprobs = -rng.exponential(0.7, reply).astype(np.float32)
        logprobs[rng.random(reply) < 0.01] = np.nan
        answer = {"role": "assistant", "content": _text(rng, reply // 2)}
        out.append(
            TurnRecord(
                index=index,
                dialect="chat",
                prompt_ids=prompt,
                token_ids=sampled,
                logprobs=logprobs,
                finish_reason="stop",
                request_messages_json=orjson.dumps(messages),
                response_message_json=orjson.dumps(answer),
                request_model="bench",
                started_at=1000.0 + index * 3.0 + rng.random(),
                ended_at=1002.0 + index * 3.0,
                auxiliary=False,
            )
        )
        result = rng.integers(0, VOCAB, growth, dtype=np.int32)
        prompt = np.concatenate([prompt, sampled, result])
        messages = [*messages, answer, {"role": "tool", "content": _text(rng, growth // 2)}]
    return out


def make_dataset(out: Path, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    writer = DatasetWriter(out, {"agent": "bench", "run": "bench", "started_at": 0.0})
    for k in range(args.rollouts):
        failed = k % 10 == 9
        turns = args.long_turns if k == 0 else args.turns
        capture = close_capture(synthetic_turns(rng, turns, args.system, args.growth, args.reply))
        reward = None if failed else float(rng.random() < 0.4)
        writer.add(
            encode_record(
                RolloutResult(
                    rollout_id=f"task-{k % TASKS:02d}__{k // TASKS}__bench",
                    task=f"task-{k % TASKS:02d}",
                    attempt=k // TASKS,
                    agent="bench",
                    sandbox="none",
                    model="bench",
                    ok=not failed and capture.trainable,
                    reward=reward,
                    reward_key=None if reward is None else "reward",
                    rewards={} if reward is None else {"reward": reward},
                    error_type=ErrorType.VERIFIER_ERROR if failed else None,
                    error="verifier failed" if failed else None,
                    counts=capture.counts,
                    model_calls=turns,
                    timings={
                        "agent_execution": float(rng.gamma(4, 5)),
                        "verifier": float(rng.gamma(2, 1)),
                        "total": 60.0,
                    },
                ),
                capture,
            )
        )
    writer.close(1.0)


def browser_times(page: Path) -> tuple[float, float, float]:
    from selenium.webdriver.common.by import By

    from tests.report.browser import chromium, js_errors, wait_for

    with chromium() as driver:
        started = time.perf_counter()
        driver.get(page.as_uri())
        loaded = time.perf_counter() - started
        rendered = wait_for(
            lambda: driver.execute_script(
                "return window.harborReport && window.harborReport.renderedMs"
            ),
            what="the draw",
        )
        row = driver.find_elements(By.CSS_SELECTOR, "#rollout-list tbody tr")[1]  # 0: the long one
        trace_ms = driver.execute_script(
            "const t = performance.now(); arguments[0].click(); return performance.now() - t", row
        )
        assert driver.find_elements(By.CSS_SELECTOR, ".tok.sampled")
        errors = js_errors(driver)
        if errors:
            raise SystemExit(f"JavaScript errors: {errors}")
    return loaded, rendered / 1000, trace_ms / 1000


LONG_TRACE = """
const [rolloutId, done] = arguments;
const longest = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) longest.push(e.duration); })
  .observe({ type: "longtask" });
const started = performance.now();
window.harborReport.select(rolloutId);
const first = performance.now() - started;
// The viewer draws a long trace a slice of turns per task; it marks the end.
const poll = () => {
  const box = document.getElementById("trace-turns");
  if (!box || box.dataset.drawn !== "all") return setTimeout(poll, 20);
  requestAnimationFrame(() => setTimeout(() => done({
    first, all: performance.now() - started, longest: Math.max(0, ...longest),
    tokens: document.querySelectorAll("#trace-turns .tok.sampled").length }), 200));
};
poll();
"""


def long_trace_times(page: Path, rollout_id: str) -> dict:
    from tests.report.browser import chromium, js_errors, wait_for

    with chromium() as driver:
        driver.set_script_timeout(300)
        driver.get(page.as_uri())
        wait_for(lambda: driver.execute_script("return window.harborReport"), what="the page")
        times = driver.execute_async_script(LONG_TRACE, rollout_id)
        if errors := js_errors(driver):
            raise SystemExit(f"JavaScript errors: {errors}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--system", type=int, default=1000)
    parser.add_argument("--growth", type=int, default=150)
    parser.add_argument("--reply", type=int, default=60)
    parser.add_argument(
        "--long-turns",
        type=int,
        default=200,
        help="Calls of the first rollout, whose trace is timed apart.",
    )
    parser.add_argument(
        "--tokenizer",
        help="The tokenizer for the token text (default: "
        "the default model's, when it is prepared on this machine).",
    )
    parser.add_argument("--keep", type=Path, help="Write the dataset here and keep it.")
    args = parser.parse_args()
    set_switches()
    with tempfile.TemporaryDirectory() as temp:
        out = args.keep or Path(temp) / "out"
        started = time.perf_counter()
        make_dataset(out, args)
        print(
            f"dataset: {args.rollouts} rollouts x {args.turns} turns "
            f"in {time.perf_counter() - started:.1f} s"
        )
        from plotly.offline import get_plotlyjs

        tokenizer = args.tokenizer or _default_tokenizer()
        plain = write_report(out, Path(temp) / "ids.html")  # "bench" has no tokenizer here
        started = time.perf_counter()
        page = write_report(out, tokenizer=tokenizer)
        built = time.perf_counter() - started
        size, plotly_js = page.stat().st_size, len(get_plotlyjs())
        print(
            f"report: {size / 1e6:.1f} MB ({plotly_js / 1e6:.1f} MB plotly.js, "
            f"{(size - plain.stat().st_size) / 1e6:.2f} MB token text from {tokenizer}), "
            f"built in {built:.1f} s"
        )
        loaded, rendered, trace = browser_times(page)
        print(
            f"chromium: load event {loaded:.1f} s, first full draw {rendered:.1f} s "
            f"after navigation, one trace drawn in {trace:.2f} s"
        )
        long_id = "task-00__0__bench"
        for name, report in (("token text", page), ("ids", plain)):
            t = long_trace_times(report, long_id)
            print(
                f"{args.long_turns}-turn trace as {name}: {t['tokens']} sampled tokens, "
                f"first turns shown in {t['first'] / 1000:.2f} s, all drawn in "
                f"{t['all'] / 1000:.2f} s, longest task {t['longest'] / 1000:.3f} s"
            )


def _default_tokenizer() -> str:
    from harbor_ray.engine.model import default_model_dir

    return str(default_model_dir())


if __name__ == "__main__":
    main()
