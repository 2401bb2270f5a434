"""What a person at the terminal sees while a command runs, and where the rest goes.

Ray, Serve, vLLM, LiteLLM and httpx write to the process's stdout and stderr (loggers,
plain prints, and the C++ core worker writing straight to fd 2). `quiet_output` sends
all of that to one log file by pointing fds 1 and 2 at it, and gives the command a
console on copies of the original descriptors: phases, progress and the summary reach
the terminal, nothing else. The descriptors are restored before an exception leaves,
so a crash's traceback still reaches the terminal.

`Phases` prints one line per step of a command's start, with the seconds since it
began, so a long engine start says what it is doing instead of staying silent.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.console import Console

__all__ = ["Phases", "Terminal", "quiet_output"]


@dataclass(frozen=True)
class Terminal:
    """The command's own output: `err` for people (phases, progress, summaries),
    `out` for what scripts read (a URL, JSON); `log` is where everything else went
    (None with --verbose)."""

    err: Console
    out: IO[str]
    log: Path | None


@contextlib.contextmanager
def quiet_output(
    console: Console, log: Path | None, *, verbose: bool = False
) -> Iterator[Terminal]:
    """Send everything but `console` (and the returned `out`) to `log`.

    With `verbose` (or no log path) nothing is redirected. `console` is pointed at the
    terminal for the duration and given back as it was.
    """
    if verbose or log is None:
        yield Terminal(console, sys.stdout, None)
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with log.open("a", buffering=1) as sink, contextlib.ExitStack() as stack:
        err = stack.enter_context(_kept(sys.stderr))
        out = stack.enter_context(_kept(sys.stdout))
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        previous = console.file
        try:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            console.file = err
            yield Terminal(console, out, log)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            console.file = previous


@contextlib.contextmanager
def _kept(stream: IO[str]) -> Iterator[IO[str]]:
    """A writer on what `stream` reaches now, unaffected by redirecting its fd later.
    A stream without a descriptor (captured in-process) is already that."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        yield stream
        return
    with os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace") as kept:
        yield kept


class Phases:
    """One line per step: `[  12s] starting the engine`, and the same prefix on every
    detail the step reports while it runs (the `progress` callbacks of the library)."""

    def __init__(self, console: Console, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._console = console
        self._clock = clock
        self._started = clock()
        self._last = ""

    def __call__(self, message: str) -> None:
        if message == self._last:
            return
        self._last = message
        self._console.print(f"[dim][{self.elapsed():5.0f}s][/dim] {message}", highlight=False)

    def elapsed(self) -> float:
        return self._clock() - self._started
