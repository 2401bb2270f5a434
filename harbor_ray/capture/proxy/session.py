"""Where a capture session's records live, behind two small async interfaces.

`CallStore` is what serving a model call needs; `AdminStore` opens, reads and ends
sessions, which only the process holding them can do. The app never assumes the
session lives in its own process: the standalone proxy and
`harbor-ray rollout` use `InMemorySessionStore`; the cluster gives each session to the
Ray actor that owns its rollout. Every admitted call ends in exactly one `record` or
`release` (or, if the process that admitted it died first, is given back by the owner),
so the budget counts model turns, not attempts that never reached the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.continuation import ContinuationBase, PrefixKey
from harbor_ray.capture.core.export import render_export
from harbor_ray.capture.core.journal import Closed, Recorded, Withdrawn
from harbor_ray.capture.core.record import ClosedCapture, close_capture
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.session_info import SessionInfo
from harbor_ray.capture.core.session_keys import (
    digest_matches,
    key_digest,
    mint_key,
    new_session_id,
    session_of,
)
from harbor_ray.capture.core.token_buffers import HeldTurns
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.journal_file import JournalFile
from harbor_ray.errors import SessionGone

Counter = Literal["engine_error", "budget_stop"]
# Hears each turn a session records, once, after it is kept: (session id, turn).
TurnListener = Callable[[str, TurnRecord], None]


@dataclass(frozen=True)
class SessionGrant:
    """What a valid key opens: the session, and what every call in it must obey."""

    session_id: str
    sampling: Sampling | None = None
    # The agent's main loop, to mark its side calls auxiliary (capture.core.auxiliary).
    main_loop: MainLoop | None = None


@dataclass(frozen=True)
class Admission:
    admitted: bool
    call_index: int  # the turn's index when admitted; -1 otherwise
    # The recorded turn whose conversation the call continues (the longest of the
    # prefixes it offered), for its prompt to be stitched; None if it continues none.
    base: ContinuationBase | None = None


class CallStore(Protocol):
    """What serving a model call needs of a session: all any proxy replica can do."""

    async def authenticate(self, key: str) -> SessionGrant | None:
        """What this key opens, or None."""
        ...

    async def admit(self, session_id: str, prefixes: Sequence[PrefixKey] = ()) -> Admission:
        """Atomically check the budget and reserve one call; `SessionGone` if it ended.
        `prefixes` (the request's message prefixes that may be an earlier turn's
        messages + reply) find the turn it continues."""
        ...

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        """Keep the turn of admitted call `turn.index`; `SessionGone` if it ended."""
        ...

    async def release(self, session_id: str, index: int, counter: Counter | None = None) -> None:
        """Give back admitted call `index`, which produced no turn (or whose recorded turn
        was never delivered: it is withdrawn), counting why."""
        ...


class AdminStore(Protocol):
    """Opening, reading and ending sessions: only where the sessions live (the admin
    routes of a proxy that holds them)."""

    async def open_session(
        self,
        *,
        budget: int | None = None,
        sampling: Sampling | None = None,
        main_loop: MainLoop | None = None,
    ) -> SessionInfo: ...

    async def export(self, session_id: str) -> dict[str, Any] | None:
        """The session's export document, or None if there is no such session."""
        ...

    async def delete(self, session_id: str) -> bool:
        """End the session; False if there was none."""
        ...

    def session_ids(self) -> list[str]: ...


@dataclass
class SessionState:
    """One session's records; the owner (whichever process) holds exactly one of these."""

    key_digest: bytes
    budget: int | None
    sampling: Sampling | None = None
    main_loop: MainLoop | None = None
    # The recorded turns, their ids held once in shared buffers (capture.core.token_buffers).
    held: HeldTurns = field(default_factory=HeldTurns)
    recorded: set[int] = field(default_factory=set)
    admitted: int = 0
    # Admitted calls with no record or release yet, by index: who holds each (a proxy
    # process other than this one, by a name its edge can check), None for this process.
    in_flight: dict[int, str | None] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: {"engine_error": 0, "budget_stop": 0})
    # Recorded turns' indices by `conversation_key`, the lowest first among equal ones
    # (the one the graph would link to), for requests that continue their conversations.
    by_conversation: dict[bytes, list[int]] = field(default_factory=dict)

    @property
    def turns(self) -> list[TurnRecord]:
        """The recorded turns, in arrival order."""
        return list(self.held.turns.values())

    def full(self) -> bool:
        """Whether the budget is taken: by turns, and by calls still in flight."""
        return self.budget is not None and len(self.held.turns) + len(self.in_flight) >= self.budget

    def admit(self, holder: str | None = None, prefixes: Sequence[PrefixKey] = ()) -> Admission:
        # No await between check and increment: atomic on the owner's event loop.
        if self.full():
            self.counters["budget_stop"] += 1
            return Admission(False, -1)
        index = self.admitted
        self.admitted += 1
        self.in_flight[index] = holder
        return Admission(True, index, self.continued(prefixes))

    def continued(self, prefixes: Sequence[PrefixKey]) -> ContinuationBase | None:
        """The turn whose messages + reply are the longest of `prefixes`, if any."""
        for prefix in sorted(prefixes, key=lambda p: p.messages, reverse=True):
            found = self.by_conversation.get(prefix.digest)
            if found:
                turn = self.held.turns[found[0]]
                if turn.prompt_ids is not None and turn.token_ids is not None:
                    return ContinuationBase(
                        turn.index, prefix.messages, turn.prompt_ids, turn.token_ids
                    )
        return None

    def record(self, turn: TurnRecord) -> bool:
        """Keep the turn; False if it was already recorded."""
        # Idempotent by admission index: a record delivered twice (a retried actor call)
        # must not become two turns.
        if turn.index in self.recorded:
            return False
        self.recorded.add(turn.index)
        self.in_flight.pop(turn.index, None)
        # Its prompt is checked against the turn it continued (when the proxy knows it)
        # and the latest lines, once, here: see capture.core.token_buffers.
        self.held.add(turn, turn.continuation.turn if turn.continuation else None)
        if turn.conversation_key:
            same = self.by_conversation.setdefault(turn.conversation_key, [])
            same.append(turn.index)
            same.sort()
        return True

    def release(self, index: int, counter: Counter | None) -> bool:
        """Give the call back; True if it withdrew a recorded turn."""
        self.in_flight.pop(index, None)
        withdrawn = index in self.recorded and index in self.held.turns
        if index in self.recorded:
            # Recorded, then its reply never reached the agent (it left before the reply
            # was handed over): the turn is withdrawn and its budget given back. The index
            # stays in `recorded`, so a late duplicate of the record cannot restore it.
            self.held.remove(index)
            for key, same in list(self.by_conversation.items()):
                same[:] = [i for i in same if i != index]
                if not same:
                    del self.by_conversation[key]
        if counter:
            self.counters[counter] += 1
        return withdrawn

    def holders(self) -> set[str]:
        """The other processes holding this session's calls in flight."""
        return {h for h in self.in_flight.values() if h is not None}

    def drop_holder(self, holder: str) -> int:
        """Give back the calls a holder took and can no longer end (it died between admit
        and record): without this, each one costs the session a call of its budget."""
        dropped = [index for index, h in self.in_flight.items() if h == holder]
        for index in dropped:
            del self.in_flight[index]
        return len(dropped)

    def close(self) -> ClosedCapture:
        """The session's closed record: its graph built once, from the turns held here."""
        return close_capture(
            self.turns,
            engine_errors=self.counters["engine_error"],
            budget_stops=self.counters["budget_stop"],
        )


class InMemorySessionStore:
    """All sessions in this process, both a `CallStore` and an `AdminStore`: for the
    standalone proxy, one-process rollouts, and the cluster's session owners (`owner`,
    if given, prefixes every session id it mints so that a stateless replica can find
    the owner from the key alone). With a `journal`, every turn recorded, withdrawn and
    every session closed is appended to it before the call returns (a rollout host's:
    what survives it, docs/sweeps.md). `on_turn`, if given, hears each turn recorded, on
    the loop that records it (the playground's run view follows calls with it); it must
    not block, and without one recording costs nothing more."""

    def __init__(
        self,
        owner: str | None = None,
        journal: JournalFile | None = None,
        *,
        on_turn: TurnListener | None = None,
    ) -> None:
        self._sessions: dict[str, SessionState] = {}
        self._owner = owner
        self.journal = journal
        self._on_turn = on_turn

    async def open_session(
        self,
        *,
        budget: int | None = None,
        sampling: Sampling | None = None,
        main_loop: MainLoop | None = None,
    ) -> SessionInfo:
        session_id = new_session_id(self._owner)
        key = mint_key(session_id)
        self._sessions[session_id] = SessionState(
            key_digest=key_digest(key), budget=budget, sampling=sampling, main_loop=main_loop
        )
        return SessionInfo(session_id, key, budget, sampling)

    def state(self, session_id: str) -> SessionState | None:
        return self._sessions.get(session_id)

    async def authenticate(self, key: str) -> SessionGrant | None:
        session_id = session_of(key)
        state = self._sessions.get(session_id) if session_id else None
        if session_id is None or state is None or not digest_matches(key, state.key_digest):
            return None
        return SessionGrant(session_id, state.sampling, state.main_loop)

    async def admit(
        self, session_id: str, prefixes: Sequence[PrefixKey] = (), holder: str | None = None
    ) -> Admission:
        return self._live(session_id).admit(holder, prefixes)

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        if self._live(session_id).record(turn):
            if self.journal is not None:
                await self.journal.append(Recorded(session_id, turn))
            if self._on_turn is not None:
                self._on_turn(session_id, turn)

    async def release(self, session_id: str, index: int, counter: Counter | None = None) -> None:
        if self._live(session_id).release(index, counter) and self.journal is not None:
            await self.journal.append(Withdrawn(session_id, index))

    def _live(self, session_id: str) -> SessionState:
        # A session can be deleted (or closed) while one of its calls runs: that call
        # then ends in `SessionGone` (the agent's 401), not a KeyError (a 500).
        state = self._sessions.get(session_id)
        if state is None:
            raise SessionGone(session_id)
        return state

    async def export(self, session_id: str) -> dict[str, Any] | None:
        """The session's export document, rendered now; the session stays open."""
        state = self._sessions.get(session_id)
        return render_export(state.close()) if state else None

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def close_session(self, session_id: str) -> ClosedCapture | None:
        """The session's closed record, after which the session is gone (None if unknown)."""
        state = self._sessions.pop(session_id, None)
        if state is None:
            return None
        if self.journal is not None:
            await self.journal.append(Closed(session_id))
            if not self._sessions:
                # Every entry is of a closed session now: the journal stays as small
                # as the sessions open (a session opened meanwhile is in `_sessions`).
                self.journal.clear()
        return state.close()

    def session_ids(self) -> list[str]:
        return list(self._sessions)


class StoreSessions:
    """A rollout's capture sessions opened and closed in the `store` held here: what
    `LocalCapture` and the cluster's `SessionOwner` share."""

    store: InMemorySessionStore

    async def open_session(
        self,
        *,
        budget: int | None,
        sampling: Sampling | None,
        main_loop: MainLoop | None = None,
    ) -> SessionInfo:
        return await self.store.open_session(budget=budget, sampling=sampling, main_loop=main_loop)

    async def close_session(self, session_id: str) -> ClosedCapture | None:
        """The session's closed record, after which the session is gone."""
        return await self.store.close_session(session_id)
