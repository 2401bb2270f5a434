"""Each rollout host's turn journal, from the host that writes it to the driver that
reads it once the host died (docs/sweeps.md, "A host's journal").

A host appends every turn its sessions record to `<directory>/<host>.journal` on its
own node (records: capture/core/journal.py; the file: capture/proxy/journal_file.py),
each session first tagged with the rollout it serves (`JournaledCapture`). When the
host dies, its journal is read on its node by a task pinned there (`collect`), once per
host, and each of its rollouts unfinished there becomes a `partial` `infra_lost` row
with the turns it had (`partial_record`). A host that ends normally removes its own
journal (`JournalFile.remove`); a dead host's stays until its rows are in the dataset:
the online service removes each once its rows are committed (`remove_one`, as
journal_debts.py says when), and every run removes what is left on every node once its
writer has closed (`remove_everywhere`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.exceptions import RayError

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.journal import JournalMode, Opened, unfinished_turns
from harbor_ray.capture.core.record import ClosedCapture, close_capture
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.session_info import SessionInfo
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.journal_file import JournalFile, read_journal
from harbor_ray.cluster.nodes import alive_nodes, on_each, pinned
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, FindingRecord, RolloutResult
from harbor_ray.trials.spec import CaptureService, RolloutSpec

__all__ = [
    "JournaledCapture",
    "Journaling",
    "collect",
    "partial_record",
    "remove_everywhere",
    "remove_one",
]

Salvaged = Mapping[str, tuple[TurnRecord, ...]]  # rollout id -> the turns it had
_COLLECT_S = 60.0  # a dead host's node that cannot read a file in this long is gone too


@dataclass(frozen=True)
class Journaling:
    """Where hosts journal and how (`mode`), and whether rows rebuilt from a journal
    may be trained on (`train_partial`)."""

    directory: Path
    mode: JournalMode = "flush"
    train_partial: bool = False

    def path(self, host: str) -> Path:
        return self.directory / f"{host}.journal"

    def open(self, host: str) -> JournalFile | None:
        """Host `host`'s journal, opened for appending; None when journaling is off."""
        return None if self.mode == "off" else JournalFile(self.path(host), self.mode)


class JournaledCapture:
    """A host's capture service for one rollout: each session it opens is first tagged
    in the host's journal with the rollout, before its key (and so any call) exists
    outside the host."""

    def __init__(self, capture: CaptureService, journal: JournalFile, rollout_id: str) -> None:
        self._capture, self._journal, self._rollout_id = capture, journal, rollout_id

    @property
    def served_model(self) -> str:
        return self._capture.served_model

    @property
    def host_url(self) -> str:
        return self._capture.host_url

    @property
    def remote_url(self) -> str | None:
        return self._capture.remote_url

    async def open_session(
        self, *, budget: int | None, sampling: Sampling | None, main_loop: MainLoop | None = None
    ) -> SessionInfo:
        session = await self._capture.open_session(
            budget=budget, sampling=sampling, main_loop=main_loop
        )
        await self._journal.append(Opened(session.session_id, self._rollout_id))
        return session

    async def close_session(self, session_id: str) -> ClosedCapture | None:
        return await self._capture.close_session(session_id)


async def collect(journaling: Journaling, host: str, node_id: str) -> Salvaged | None:
    """The unfinished rollouts' turns in dead host `host`'s journal, read on its node;
    None when the node is gone too (its disk with it) or does not answer."""
    ref = pinned(_read_task, node_id).remote(journaling.path(host))
    try:
        async with asyncio.timeout(_COLLECT_S):
            found: Salvaged = await ref
    except (RayError, TimeoutError):
        ray.cancel(ref, force=True)
        return None
    return found


@ray.remote
def _read_task(path: Path) -> dict[str, tuple[TurnRecord, ...]]:
    return dict(unfinished_turns(read_journal(path).entries))


async def remove_one(journaling: Journaling, host: str, node_id: str) -> None:
    """Remove dead host `host`'s journal, on its node, once nothing in it is needed (its
    rows committed). A node gone meanwhile took the journal with it."""
    with contextlib.suppress(RayError):
        await pinned(_unlink_task, node_id).remote(journaling.path(host))


@ray.remote
def _unlink_task(path: Path) -> None:
    path.unlink(missing_ok=True)


def remove_everywhere(journaling: Journaling) -> None:
    """Remove every host journal of the run, on every live node; only once each row made
    from them is committed (the writer closed): a journal is the only copy of a dead
    host's turns until then. A node lost meanwhile took its journals with it."""
    if journaling.mode != "off":
        on_each(_remove_task, alive_nodes(), journaling.directory)


@ray.remote
def _remove_task(directory: Path) -> int:
    removed = 0
    for path in directory.glob("*.journal"):
        path.unlink(missing_ok=True)
        removed += 1
    with contextlib.suppress(OSError):  # absent, or holding something else
        directory.rmdir()
    return removed


def partial_record(
    spec: RolloutSpec,
    turns: tuple[TurnRecord, ...],
    *,
    rollout_id: str,
    error: str,
    seconds: float,
    node: str | None,
    host: str,
    train_partial: bool,
) -> RolloutRecord:
    """The `infra_lost` row of a rollout whose host died, with the turns its journal
    kept, marked `partial` (never `ok`; `trainable` only with `train_partial`)."""
    closed = close_capture(turns)
    return encode_record(
        RolloutResult(
            rollout_id=rollout_id,
            task=spec.task.name,
            attempt=spec.attempt,
            agent=spec.agent,
            sandbox=spec.sandbox,
            ok=False,
            reward=None,
            error_type=ErrorType.INFRA_LOST,
            error=error,
            timings={"total": seconds},
            node=node,
            host=host,
            counts=closed.counts,
            model_calls=len(turns),
            findings=[
                *map(FindingRecord.of, closed.findings),
                FindingRecord(
                    code="journal_partial",
                    severity="warn",
                    message=f"{len(turns)} turns read from the dead host's journal",
                ),
            ],
            capture_level=turns[0].capture_level if turns else None,
            partial=True,
            train_partial=train_partial,
            provenance=spec.provenance,
        ),
        closed,
    )
