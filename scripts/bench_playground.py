"""What the playground's task browser costs on a large dataset, in the browser.

Generates `--tasks` tasks (default 5,000; each a task.toml, an instruction of a few
hundred characters and a test), serves them with `harbor-ray playground`'s app (runs
are not started), and measures in headless Chromium (Debian's /usr/bin/chromium):
  - resolving the dataset (Harbor loads each task) and the /api/tasks answer's size;
  - time from navigation to the full list drawn (the first 500 rows; the count of all);
  - filtering as you type: `--query` typed one character at a time, each keystroke's
    redraw timed in the page (input event to the list replaced), median and max.

    .venv/bin/python scripts/bench_playground.py [--tasks 5000] [--query task-4242]

Not measured (not built yet): a 200-turn rollout's calls rendered in a run view.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' Chromium driver and served playground

from harbor_ray.playground.catalog import Catalog  # noqa: E402
from harbor_ray.trials.datasets import resolve_dataset  # noqa: E402
from tests.playground.served import FakeRollouts, served  # noqa: E402
from tests.report.browser import chromium, js_errors, wait_for  # noqa: E402

_TOML = 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 300.0\n'
_WORDS = (
    "parse",
    "the",
    "log",
    "file",
    "and",
    "count",
    "distinct",
    "users",
    "per",
    "region",
    "then",
    "write",
    "a",
    "json",
    "summary",
    "sorted",
    "by",
    "name",
)

_TYPE_ONE = """
const [box, text] = arguments;
box.value = text;
const start = performance.now();
box.dispatchEvent(new Event('input'));
return performance.now() - start;
"""


# Clicks the run's row, then counts frames until every call is drawn; resolves with
# the times (ms) of the whole, the longest task and the longest frame.
_OPEN_RUN = """
const [row, calls, finish] = arguments;
const tasks = [];
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) tasks.push(entry.duration);
});
observer.observe({ type: "longtask" });
const frames = [];
const start = performance.now();
let previous = start;
const before = document.querySelectorAll("#run-calls .call").length;
let drawn = null;
function frame(now) {
  frames.push(now - previous); previous = now;
  if (drawn === null && document.querySelectorAll("#run-calls .call").length >= calls) {
    drawn = 0;  // every call is in; the next frame starts once they are laid out
    requestAnimationFrame(frame);
  } else if (drawn === 0) {
    drawn = performance.now() - start;
    setTimeout(() => {  // the observer reports a task after it ends
      observer.disconnect();
      finish({ drawn, before, longest_task: Math.max(0, ...tasks),
               longest_frame: Math.max(...frames) });
    }, 100);
  } else requestAnimationFrame(frame);
}
row.click();
requestAnimationFrame(frame);
"""

_RUN_ONE = """
const [task, finish] = arguments;
fetch("/api/runs", { method: "POST", headers: { "content-type": "application/json" },
  body: JSON.stringify({ agent: "oracle", dataset: task.dataset, task: task.name }) })
  .then((r) => r.json()).then(finish);
"""


def write_tasks(root: Path, count: int) -> Path:
    for i in range(count):
        task = root / f"task-{i:05d}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(_TOML)
        words = [_WORDS[(i * 7 + k) % len(_WORDS)] for k in range(40)]
        (task / "instruction.md").write_text(f"Task {i}: " + " ".join(words) + ".\n")
        (task / "tests" / "test.sh").write_text("exit 0\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--query", default="task-04242")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--call-tokens", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = write_tasks(Path(scratch) / "tasks", args.tasks)
        began = time.perf_counter()
        catalog = Catalog([resolve_dataset(str(root))])
        print(f"tasks: {args.tasks}; resolved in {time.perf_counter() - began:.2f} s")
        rollouts = FakeRollouts(calls=args.turns, tokens=args.call_tokens)
        with (
            served(catalog, Path(scratch) / "runs", rollouts=rollouts) as url,
            chromium() as driver,
        ):
            began = time.perf_counter()
            driver.get(url)
            wait_for(
                lambda: (
                    driver.execute_script(
                        "return document.querySelectorAll('#task-list li').length"
                    )
                    > 0
                ),
                what="the list",
            )
            drawn = time.perf_counter() - began
            count = driver.execute_script(
                "return document.getElementById('task-count').textContent"
            )
            print(f"page to full list drawn: {drawn:.2f} s ({count})")
            size = driver.execute_script(
                "return fetch('/api/tasks').then(r => r.text()).then(t => t.length)"
            )
            print(f"/api/tasks: {size / 1e6:.2f} MB")
            box = driver.find_element("id", "task-filter")
            times = [
                driver.execute_script(_TYPE_ONE, box, args.query[:n])
                for n in range(1, len(args.query) + 1)
            ]
            shown = driver.execute_script(
                "return document.querySelectorAll('#task-list li').length"
            )
            print(
                f"filter as you type ({len(times)} keystrokes of {args.query!r}, "
                f"{shown} shown at the end): median {statistics.median(times):.1f} ms, "
                f"max {max(times):.1f} ms"
            )
            run_view(driver, str(root), args.turns)
            assert js_errors(driver) == []
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def run_view(driver, dataset: str, turns: int) -> None:  # type: ignore[no-untyped-def]
    """A finished `turns`-call run of `dataset`'s first task opened in the run view."""
    driver.set_script_timeout(300)
    run = driver.execute_async_script(_RUN_ONE, {"dataset": dataset, "name": "task-00000"})
    driver.find_element("css selector", "#tabs button[data-tab=runs]").click()
    wait_for(
        lambda: "done" in driver.find_element("id", "run-list").text,
        timeout_s=300,
        what="the run done",
    )
    size = driver.execute_script(
        "const id = arguments[0]; let next = 0, bytes = 0;"
        "const read = () => fetch('/api/calls?id=' + id + '&after=' + next)"
        ".then(r => r.text()).then(t => { bytes += t.length; const p = JSON.parse(t);"
        " next = p.next; return p.more ? read() : bytes; }); return read();",
        run["id"],
    )
    row = driver.find_element("css selector", "#run-list tbody tr")
    timing = driver.execute_async_script(_OPEN_RUN, row, turns)
    print(
        f"run view, {turns} calls ({size / 1e6:.2f} MB over /api/calls): all drawn "
        f"{timing['drawn']:.0f} ms after the click; longest task "
        f"{timing['longest_task']:.0f} ms, longest frame {timing['longest_frame']:.0f} ms"
    )
    assert timing["before"] == 0


if __name__ == "__main__":
    main()
