"""What a person watching a sweep sees: a live bar, then tables by task and by error."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harbor_ray.cluster.sweep import SweepStats


@contextmanager
def live_progress(console: Console) -> Iterator[Callable[[SweepStats], None]]:
    """A progress bar, and the `on_stats` callback that updates it."""
    with Progress(TextColumn("rollouts"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("", total=None)

        def update(stats: SweepStats) -> None:
            progress.update(bar, total=stats.total, completed=stats.done,
                            description=status_line(stats, time.time()))

        yield update


def status_line(stats: SweepStats, now: float) -> str:
    mean = "-" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
    return (f"{stats.done}/{stats.total} done, {stats.ok} ok, {stats.failed} failed, "
            f"mean reward {mean}, {stats.per_minute(now):.1f}/min, "
            f"in flight {stats.in_flight} (peak {stats.peak_in_flight})")


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
    console.print(f"{stats.done} rollouts in {seconds:.1f} s ({stats.skipped} already done), "
                  f"{stats.ok} ok, peak in flight {stats.peak_in_flight}")
    console.print(f"dataset: {out}")
