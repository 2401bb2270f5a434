"""A job's event loop, stopped by SIGINT or SIGTERM: the work is cancelled (no rollout
starts after the signal; each running one is cancelled, and Harbor tears its sandbox
down before the cancellation gets through), then `Interrupted` says so.

Not left to Python's defaults: a process started in the background by a
non-interactive shell inherits SIGINT ignored, and Python then never raises
KeyboardInterrupt (`harbor-ray qualify` went on starting trials through Ctrl-C); and
SIGTERM's default ends the process at once, its sandboxes mid-rollout and no word said.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any

from harbor_ray.errors import Interrupted

__all__ = ["STOP_SIGNALS", "run_until_signalled", "wait_for_stop_signal"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_until_signalled[T](work: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(work)`; SIGINT or SIGTERM cancel `work` and, once it has unwound,
    raise `Interrupted`. Off the main thread (where no handler can be set) it is
    `asyncio.run`."""
    return asyncio.run(_cancelled_on_signals(work))


async def _cancelled_on_signals[T](work: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    received: list[signal.Signals] = []

    def stop(signum: signal.Signals) -> None:
        received.append(signum)
        task.cancel()  # again on a second signal: a teardown waiting on it ends sooner

    installed = STOP_SIGNALS if threading.current_thread() is threading.main_thread() else ()
    for signum in installed:
        loop.add_signal_handler(signum, stop, signum)
    try:
        try:
            result = await task
        except asyncio.CancelledError:
            if not received:
                raise
        if received:  # also when some work turned the cancellation into a result
            first = received[0]
            raise Interrupted(
                f"stopped by {first.name}: no rollout started after it, and "
                "the running ones were cancelled and their sandboxes torn "
                "down",
                signal=first,
            )
        return result
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def wait_for_stop_signal() -> signal.Signals:
    """Block this (main) thread until SIGINT or SIGTERM arrives, and say which: for a
    command whose work runs elsewhere (`engine up` keeps a local cluster's engine up)
    and that must clean up on either signal, also where the shell left SIGINT ignored."""
    previous = {signum: signal.signal(signum, _pending) for signum in STOP_SIGNALS}
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return signal.Signals(signal.sigwait(STOP_SIGNALS))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _pending(signum: int, frame: object) -> None:
    """A handler that is never run: an ignored signal is discarded when sent, a handled
    one stays pending while blocked, which is what `sigwait` takes."""
