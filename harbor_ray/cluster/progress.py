"""What a person watching a sweep sees: a live bar (or, without a terminal, a status line
every few seconds), then tables by task and by error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harbor_ray.cluster.sweep import SweepStats


@contextmanager
def live_progress(
    console: Console, *, every_s: float = 10.0
) -> Iterator[Callable[[SweepStats], None]]:
    """The `on_stats` callback that shows a sweep's progress: a bar on a terminal; in a
    log or a pipe (CI, `ray job submit`) a status line every `every_s` seconds and at
    the end, since a bar there would print once, when it is done."""
    if not console.is_terminal:
        with _status_lines(console, every_s) as update:
            yield update
        return
    with Progress(
        TextColumn("rollouts"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("", total=None)

        def update(stats: SweepStats) -> None:
            progress.update(
                bar,
                total=stats.total,
                completed=stats.done,
                description=status_line(stats, time.time()),
            )

        yield update


@contextmanager
def _status_lines(console: Console, every_s: float) -> Iterator[Callable[[SweepStats], None]]:
    latest: list[SweepStats] = []  # the sweep's stats object (it is updated in place)
    stop = threading.Event()

    def update(stats: SweepStats) -> None:
        latest[:] = [stats]

    def show() -> None:
        if latest:
            console.print(f"rollouts: {status_line(latest[0], time.time())}", highlight=False)

    def tick() -> None:
        while not stop.wait(every_s):
            show()

    ticker = threading.Thread(target=tick, name="sweep-progress", daemon=True)
    ticker.start()
    try:
        yield update
    finally:
        stop.set()
        ticker.join()
        show()


def status_line(stats: SweepStats, now: float) -> str:
    mean = "-" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
    return (
        f"{stats.done}/{stats.total} done, {stats.ok} ok, {stats.failed} failed, "
        f"mean reward {mean}, {stats.per_minute(now):.1f}/min, "
        f"in flight {stats.in_flight} (peak {stats.peak_in_flight}), cap {stats.limit}"
    )


def print_summary(stats: SweepStats, out: Path, console: Console) -> None:
    by_task = Table(title="sweep by task")
    outcomes = sorted({o for counts in stats.by_task.values() for o in counts})
    for column in ("task", *outcomes):
        by_task.add_column(column)
    for task, counts in sorted(stats.by_task.items()):
        by_task.add_row(task, *(str(counts.get(o, 0)) for o in outcomes))
    console.print(by_task)
    if stats.by_error:
        by_error = Table(title="failures by error type")
        by_error.add_column("error type")
        by_error.add_column("rollouts")
        for error, count in stats.by_error.most_common():
            by_error.add_row(error, str(count))
        console.print(by_error)
    seconds = (stats.ended_at or time.time()) - stats.started_at
    low, high = stats.limits_seen
    cap = f", cap {low}..{high}" if low != high else ""
    console.print(
        f"{stats.done} rollouts in {seconds:.1f} s ({stats.skipped} already done), "
        f"{stats.ok} ok, peak in flight {stats.peak_in_flight}{cap}"
    )
    if stats.builds:
        console.print(
            f"task images: {stats.builds} rollouts waited for a build or unpack, "
            f"{stats.build_s:.1f} s in all (the rest of each rollout's time is "
            "its own)"
        )
    console.print(f"dataset: {out}")
