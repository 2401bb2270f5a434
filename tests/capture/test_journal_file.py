"""A host's journal on disk: what each mode syncs, and a session store that journals
every turn it keeps (once), every turn it withdraws and every session it closes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.capture.core.journal import Closed, Opened, Recorded
from harbor_ray.capture.proxy.journal_file import JournalFile, read_journal
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.turns_factory import turn


@pytest.mark.parametrize(("mode", "syncs"), [("fsync", 3), ("flush", 0)])
async def test_fsync_syncs_every_entry_and_flush_none(tmp_path: Path, mode, syncs: int) -> None:
    synced: list[int] = []
    journal = JournalFile(tmp_path / "j" / "h.journal", mode, sync=synced.append)
    entries = [Opened("h.s", "r"), Recorded("h.s", turn(0, [1], [2])), Closed("h.s")]
    for count, entry in enumerate(entries, 1):
        await journal.append(entry)
        # Readable by another process as soon as `append` returns, in either mode.
        assert len(read_journal(journal.path).entries) == count
    journal.close()
    assert len(synced) == syncs


async def test_the_store_journals_what_it_keeps_once(tmp_path: Path) -> None:
    journal = JournalFile(tmp_path / "h.journal", "flush")
    store = InMemorySessionStore(owner="h", journal=journal)
    session = await store.open_session()
    other = await store.open_session()  # keeps the journal from being emptied
    sid = session.session_id
    for _ in range(3):
        await store.admit(sid)
    await store.record(sid, turn(0, [1], [2]))
    await store.record(sid, turn(0, [1], [2]))  # a retried actor call: kept once
    await store.record(sid, turn(1, [1, 2, 3], [4]))
    await store.release(sid, 1)  # recorded, never delivered: withdrawn
    await store.release(sid, 2, "engine_error")  # never recorded: nothing to journal
    await store.close_session(sid)
    kinds = [
        (type(e).__name__, getattr(e, "index", None)) for e in read_journal(journal.path).entries
    ]
    assert kinds == [("Recorded", None), ("Recorded", None), ("Withdrawn", 1), ("Closed", None)]
    # The last open session closes: nothing in the journal can be needed any more.
    await store.close_session(other.session_id)
    assert read_journal(journal.path).entries == ()
    await store.open_session()
    await journal.append(Opened("h.x", "r2"))  # appends start the emptied file afresh
    assert read_journal(journal.path).entries == (Opened("h.x", "r2"),)
