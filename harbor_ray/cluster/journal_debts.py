"""Which dead hosts' journals still hold the only copy of a row's turns (pure).

A dead host's journal is read once (`journaling.collect`); each of its rollouts found
there becomes a row rebuilt from it. Until every such row is committed to the dataset
the journal is the only durable copy of those turns, so it stays; once the last is
committed it may go (docs/sweeps.md, "A host's journal"). A journal that held no
rollout may go as soon as it was read. A row never committed (its group dropped, no
dataset) keeps its journal until the run removes every journal at its end.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["JournalDebts"]


class JournalDebts:
    """Per dead host, the rollouts read from its journal whose rows are not committed."""

    def __init__(self) -> None:
        self._owed: dict[str, set[str]] = {}  # host -> rollout ids read, not committed
        self._rows: dict[str, tuple[str, str]] = {}  # row id -> (host, rollout id)

    def read(self, host: str, rollout_ids: Iterable[str]) -> bool:
        """`host`'s journal held `rollout_ids`' turns; True when it held none, so that
        nothing waits on it and it may go now."""
        owed = set(rollout_ids)
        if owed:
            self._owed[host] = owed
        return not owed

    def made(self, row_id: str, host: str, rollout_id: str) -> None:
        """The row `row_id` was rebuilt from `rollout_id`'s turns in `host`'s journal
        (its id differs from the rollout's when the lost try is retried)."""
        self._rows[row_id] = (host, rollout_id)

    def committed(self, row_ids: Iterable[str]) -> list[str]:
        """The hosts whose journals may go now that the rows `row_ids` are committed:
        those of which every rollout read from the journal now has a committed row."""
        freed = []
        for row_id in row_ids:
            if (source := self._rows.pop(row_id, None)) is None:
                continue  # not rebuilt from a journal
            host, rollout_id = source
            owed = self._owed.get(host)
            if owed is None:
                continue
            owed.discard(rollout_id)
            if not owed:
                del self._owed[host]
                freed.append(host)
        return freed
