"""The quiet console: libraries' output goes to the log file, the command's own to the
terminal; progress without a terminal is a line every few seconds."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from rich.console import Console

from harbor_ray.cluster.progress import live_progress, print_summary
from harbor_ray.cluster.sweep import SweepStats
from harbor_ray.data.result import RolloutResult
from harbor_ray.terminal import Phases

# Every way a library reaches the terminal: a logger, a print, the C++ side writing to
# fd 2 directly; then the command's own output.
_SCRIPT = textwrap.dedent("""
    import logging, os, sys
    from pathlib import Path
    from rich.console import Console
    from harbor_ray.terminal import quiet_output

    console = Console(stderr=True)
    logging.basicConfig(level=logging.INFO)
    with quiet_output(console, Path(sys.argv[1]), verbose=sys.argv[2] == "verbose") as t:
        logging.getLogger("ray.serve").info("deployment options {'num_replicas': 2}")
        print("library print")
        os.write(2, b"raylet: Task ServeController.graceful_shutdown failed\\n")
        console.print("phase: starting")
        print("http://127.0.0.1:8000/v1", file=t.out)
        if sys.argv[3] == "crash":
            raise RuntimeError("boom")
""")


def _run(tmp_path: Path, mode: str, end: str = "ok") -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "logs" / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(log), mode, end],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, log.read_text() if log.exists() else ""


def test_library_output_goes_to_the_log_and_the_commands_own_to_the_terminal(
    tmp_path: Path,
) -> None:
    done, log = _run(tmp_path, "quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "phase: starting"
    assert done.stdout.strip() == "http://127.0.0.1:8000/v1"
    for noise in ("deployment options", "library print", "graceful_shutdown failed"):
        assert noise in log
        assert noise not in done.stderr + done.stdout


def test_a_crash_still_shows_its_traceback(tmp_path: Path) -> None:
    done, log = _run(tmp_path, "quiet", "crash")
    assert done.returncode == 1
    assert "RuntimeError: boom" in done.stderr
    assert "library print" in log and "library print" not in done.stderr


def test_verbose_lets_everything_through(tmp_path: Path) -> None:
    done, log = _run(tmp_path, "verbose")
    assert "deployment options" in done.stderr
    assert "graceful_shutdown failed" in done.stderr
    assert "library print" in done.stdout
    assert log == ""


def test_without_a_terminal_progress_is_a_line_every_interval() -> None:
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=200)
    stats = SweepStats(total=4)

    def lines() -> list[str]:
        return [line for line in sink.getvalue().splitlines() if line.startswith("rollouts:")]

    with live_progress(console, every_s=0.05) as update:
        update(stats)
        deadline = time.monotonic() + 30
        while len(lines()) < 2 and time.monotonic() < deadline:  # a bar: nothing until the end
            time.sleep(0.01)
        assert len(lines()) >= 2, sink.getvalue()
        stats.done = stats.ok = 4
        update(stats)
    assert lines()[0].startswith("rollouts: 0/4 done")
    assert lines()[-1].startswith("rollouts: 4/4 done, 4 ok, 0 failed")


def test_phases_carry_the_elapsed_seconds_and_skip_repeats() -> None:
    sink = io.StringIO()
    now = [100.0]
    phases = Phases(Console(file=sink, width=200), clock=lambda: now[0])
    phases("starting a local Ray cluster")
    now[0] = 142.0
    phases("engine deploying")
    phases("engine deploying")
    assert sink.getvalue().splitlines() == [
        "[    0s] starting a local Ray cluster",
        "[   42s] engine deploying",
    ]


def test_the_summary_gives_the_wait_for_images_apart() -> None:
    sink = io.StringIO()
    stats = SweepStats(total=3)
    for build_s in (12.5, 0.0, 3.5):
        timings = {"total": 20.0, **({"environment_build": build_s} if build_s else {})}
        stats.add(
            RolloutResult(
                rollout_id="r",
                task="t",
                agent="oracle",
                sandbox="container",
                ok=True,
                reward=1.0,
                timings=timings,
            )
        )
    print_summary(stats, Path("out"), Console(file=sink, width=200))
    assert "task images: 2 rollouts waited for a build or unpack, 16.0 s in all" in (
        " ".join(sink.getvalue().split())
    )
