"""`harbor_ray.jobs.interrupts`: SIGINT and SIGTERM cancel a job's work, which unwinds,
then `Interrupted` says so; without a signal the work runs as under `asyncio.run`."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from harbor_ray.errors import Interrupted
from harbor_ray.jobs.interrupts import run_until_signalled


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_cancels_the_work_and_says_which(signum: signal.Signals) -> None:
    unwound: list[str] = []

    async def work() -> None:
        try:
            os.kill(os.getpid(), signum)
            await asyncio.sleep(30)
        finally:
            unwound.append("torn down")

    with pytest.raises(Interrupted, match=signum.name) as caught:
        run_until_signalled(work())
    assert caught.value.signal == signum and unwound == ["torn down"]


def test_work_that_turns_the_cancellation_into_a_result_is_still_interrupted() -> None:
    async def work() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "a row"
        return "done"

    with pytest.raises(Interrupted):
        run_until_signalled(work())


def test_without_a_signal_it_is_asyncio_run_and_the_handlers_go_after() -> None:
    async def work() -> int:
        return 7

    before = signal.getsignal(signal.SIGTERM)
    assert run_until_signalled(work()) == 7
    assert signal.getsignal(signal.SIGTERM) == before
