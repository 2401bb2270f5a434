"""The controller's bookkeeping, pure: accepted requests, groups and their rollouts'
rows, what is ready, delivered, dropped; capacity and staleness. No Ray, no clock, no
I/O: the controller calls in with what happened (and the time).

A group (the n rollouts of one task a submit asked for) is finished when every rollout
ended as a row; then it is ready until acknowledged, or dropped past its staleness bound
under the `drop` policy; under `mask` it is delivered with its tokens past the bound out
of the loss mask (data/token_versions.py). A group of a request that asked to drop
groups without signal (rewards all equal: `no_signal.py`) is dropped as it finishes and
a replacement group takes its place, within the request's bound. Retention: a closed
group (acknowledged, dropped, or cancelled with every rollout ended) stays `retain_s`
seconds and at most `retain_groups` of them stay; an acknowledged or cancelled group
lets its rows go as it closes, a dropped one keeps them until forgotten; an open group
is never forgotten. The `request_id` index keeps every request with a group in the book
and the `request_ids` most recent others.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from harbor_ray.data.encode import RolloutRecord, with_provenance
from harbor_ray.data.rebuild import rebuild_prompts
from harbor_ray.data.token_versions import mask_stale, sequence_versions, turn_segments
from harbor_ray.errors import ServiceConfigError
from harbor_ray.online.no_signal import Refill, Verdict, carries_signal, judge
from harbor_ray.online.wire import Group, GroupRef, StalePolicy, SubmitReply

__all__ = ["Book", "GroupState", "Phase", "sampled_versions", "version_span", "weights_as_sampled"]


class Phase(StrEnum):
    RUNNING = "running"
    READY = "ready"  # finished, waiting for its acknowledgement
    DELIVERED = "delivered"  # acknowledged
    DROPPED = "dropped"  # finished too stale under the `drop` policy
    CANCELLED = "cancelled"  # cancelled by the caller (its rows are kept, not delivered)
    NO_SIGNAL = "no_signal"  # finished with rewards all equal: dropped, a replacement runs


@dataclass
class GroupState:
    group_id: str
    request_id: str
    task: str
    rollout_ids: tuple[str, ...]
    max_staleness: int | None
    metadata: dict[str, Any]
    # The agent (harness) its rollouts run: its task's in the request, else the
    # request's; its replacements run it too, so that a group never mixes harnesses.
    agent: str
    records: dict[str, RolloutRecord] = field(default_factory=dict)
    phase: Phase = Phase.RUNNING
    finished_version: int | None = None
    # Its submitter waits for it (an MCP tool call): never handed to the long poll.
    awaited: bool = False
    # Nothing more can happen to it (see the module's docstring).
    closed: bool = False
    # Its versions, kept once every rollout ended: they outlive its rows.
    span: tuple[int | None, int | None] | None = None
    # Under the `mask` policy, its staleness bound: tokens further behind
    # `finished_version` are delivered out of the loss mask.
    mask_bound: int | None = None
    # Its request's replacements, when it asked to drop groups without signal.
    refill: Refill | None = None
    # The submit reply's group whose place it takes (None: it is that group); the
    # no-signal groups dropped in that place before it; the group that replaced it.
    replaces: str | None = None
    dropped_before: int = 0
    replaced_by: str | None = None
    # Without signal, delivered because its request's extra groups were spent.
    no_signal: bool = False

    @property
    def n(self) -> int:
        return len(self.rollout_ids)

    @property
    def unfinished(self) -> int:
        return self.n - len(self.records)

    def versions(self) -> tuple[int | None, int | None]:
        """The oldest and newest policy version over every turn of the group."""
        if self.span is not None:
            return self.span
        return version_span(r.turns for r in self.records.values())

    def staleness(self) -> int | None:
        oldest, _ = self.versions()
        if oldest is None or self.finished_version is None:
            return None
        return self.finished_version - oldest

    def payload(self) -> Group:
        """The group as `GET /v1/groups` delivers it."""
        records = [self.records[r] for r in self.rollout_ids]
        oldest, newest = self.versions()
        assert self.finished_version is not None, "only a finished group is delivered"
        turns = [row for r in records for row in rebuild_prompts(r.turns).to_pylist()]
        sequences, masked = _versioned(
            [row for r in records for row in r.sequences.to_pylist()],
            turns,
            self.finished_version,
            self.mask_bound,
        )
        return Group(
            group_id=self.group_id,
            request_id=self.request_id,
            task=self.task,
            n=self.n,
            metadata=self.metadata,
            policy_version_min=oldest,
            policy_version_max=newest,
            finished_version=self.finished_version,
            staleness=self.staleness(),
            rollouts=[row for r in records for row in r.rollout.to_pylist()],
            sequences=sequences,
            turns=turns,
            masked_tokens=masked,
            replaces=self.replaces,
            no_signal=self.no_signal,
            no_signal_dropped=self.dropped_before,
        )

    def rewards(self) -> list[float | None]:
        return [self.records[r].result.reward for r in self.rollout_ids if r in self.records]


def _versioned(
    sequences: list[dict[str, Any]], turns: list[dict[str, Any]], current: int, bound: int | None
) -> tuple[list[dict[str, Any]], int]:
    """The sequences with their `policy_versions`, and masked past `bound` if given;
    and how many sampled tokens that masked."""
    masked = 0
    for sequence in sequences:
        versions = sequence_versions(sequence, turns)
        sequence["policy_versions"] = versions
        if bound is not None:
            kept = mask_stale(sequence["loss_mask"], versions, current, bound)
            masked += sum(sequence["loss_mask"]) - sum(kept)
            sequence["loss_mask"] = kept
    return sequences, masked


def version_span(turn_tables: Iterable[pa.Table]) -> tuple[int | None, int | None]:
    """(min of `policy_version_start`, max of `policy_version_end`) over the tables;
    None where no turn recorded one (or the tables predate the columns)."""
    lows, highs = [], []
    for turns in turn_tables:
        if turns.num_rows == 0 or "policy_version_start" not in turns.column_names:
            continue
        lows.append(pc.min(turns["policy_version_start"]).as_py())
        highs.append(pc.max(turns["policy_version_end"]).as_py())
    lows = [v for v in lows if v is not None]
    highs = [v for v in highs if v is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def sampled_versions(turns: pa.Table) -> set[int | None]:
    """The policy versions that sampled a rollout's tokens: each turn's segments
    (`policy_segments`: the engine's own labels), else the version its call was
    forwarded at (None: a turn that recorded none)."""
    if turns.num_rows == 0:
        return set()
    if "policy_segments" not in turns.column_names:
        return {None}
    found: set[int | None] = set()
    for turn in turns.select(["policy_version_start", "policy_segments"]).to_pylist():
        segments = turn_segments(turn)
        found |= {None} if segments is None else {version for version, _ in segments}
    return found


def weights_as_sampled(record: RolloutRecord, first_version: int) -> RolloutRecord:
    """`record` whose provenance names the weights (`model_source`, `weights_sha256`)
    only where every token it holds was sampled at `first_version`, by the weights the
    engine started with. A row that an update's weights sampled, in part or whole, or
    one with no token (which weights the engine held then, the row cannot say), keeps
    only what an update leaves alone: the tokenizer, the chat template, the harness."""
    provenance = record.result.provenance
    if provenance is None or sampled_versions(record.turns) == {first_version}:
        return record
    weightless = provenance.without_weights()
    return record if weightless == provenance else with_provenance(record, weightless)


@dataclass
class Book:
    """Everything the controller knows; one instance per controller."""

    capacity: int
    max_staleness: int | None = None  # the default bound, in policy versions
    stale_policy: StalePolicy = "drop"
    retain_s: float = 600.0  # a closed group's stay
    retain_groups: int = 10_000  # closed groups kept at most
    request_ids: int = 10_000  # closed requests whose ids are kept at most
    requests: OrderedDict[str, SubmitReply] = field(default_factory=OrderedDict)
    groups: dict[str, GroupState] = field(default_factory=dict)
    ready: list[str] = field(default_factory=list)  # finished order, oldest first
    by_rollout: dict[str, str] = field(default_factory=dict)  # rollout id -> group id
    errors: Counter[str] = field(default_factory=Counter)
    staleness_seen: Counter[str] = field(default_factory=Counter)
    finished_rollouts: int = 0
    delivered: int = 0
    dropped: int = 0
    cancelled: int = 0
    # Groups of requests that drop those without signal: dropped (each replaced),
    # delivered flagged at the request's bound, kept with signal; replacement rollouts.
    no_signal_dropped: int = 0
    no_signal_delivered: int = 0
    signal_kept: int = 0
    extra_rollouts: int = 0
    _unfinished: int = 0
    _open: Counter[str] = field(default_factory=Counter)  # request id -> groups kept
    _closing: list[str] = field(default_factory=list)  # closed since the last forget
    _closed: OrderedDict[str, float] = field(default_factory=OrderedDict)  # id -> when

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ServiceConfigError("capacity must be at least 1")
        if self.retain_s < 0 or self.retain_groups < 0 or self.request_ids < 0:
            raise ServiceConfigError(
                "retain_s, retain_groups and request_ids cannot be negative (0 keeps none)"
            )

    @property
    def unfinished(self) -> int:
        """Rollouts of running groups without a row yet (what counts against capacity)."""
        return self._unfinished

    def known(self, request_id: str) -> SubmitReply | None:
        return self.requests.get(request_id)

    def over_capacity(self, asked: int) -> str | None:
        """Why `asked` more rollouts do not fit now; None when they do."""
        if self.unfinished + asked <= self.capacity:
            return None
        return (
            f"{self.unfinished} rollouts unfinished + {asked} asked exceed the "
            f"capacity of {self.capacity}"
        )

    def accept(self, request_id: str, groups: Sequence[GroupState], version: int) -> SubmitReply:
        """Take a new request's groups (the caller checked `over_capacity`)."""
        for group in groups:
            self.groups[group.group_id] = group
            for rollout_id in group.rollout_ids:
                self.by_rollout[rollout_id] = group.group_id
        reply = SubmitReply(
            groups=[GroupRef(group_id=g.group_id, task=g.task, n=g.n) for g in groups],
            policy_version=version,
        )
        self.requests[request_id] = reply
        self._open.update(g.request_id for g in groups)
        self._unfinished += sum(g.n for g in groups)
        return reply

    def finish(self, record: RolloutRecord, version: int) -> GroupState | None:
        """Keep a rollout's row; the group if this finished it (now ready or dropped)."""
        group = self.groups.get(self.by_rollout.get(record.rollout_id, ""))
        if group is None or group.closed or record.rollout_id in group.records:
            return None  # a row for nothing open, or delivered twice: kept once
        group.records[record.rollout_id] = record
        if group.phase is Phase.RUNNING:
            self._unfinished -= 1
        self.finished_rollouts += 1
        if record.result.error_type is not None:
            self.errors[str(record.result.error_type)] += 1
        if not group.unfinished and group.phase is Phase.CANCELLED:
            self._close(group)
        if group.unfinished or group.phase is not Phase.RUNNING:
            return None
        group.finished_version = version
        group.span = group.versions()
        staleness = group.staleness()
        self.staleness_seen[str(staleness)] += 1
        bound = group.max_staleness if group.max_staleness is not None else self.max_staleness
        if self.stale_policy == "mask":
            group.mask_bound = bound
        if (
            staleness is not None
            and bound is not None
            and staleness > bound
            and self.stale_policy == "drop"
        ):
            group.phase = Phase.DROPPED
            self.dropped += 1
            self._close(group, keep_rows=True)
        elif (verdict := judge(group.rewards(), group.refill)) is Verdict.DROP:
            assert group.refill is not None
            group.phase = Phase.NO_SIGNAL
            group.refill.no_signal.add(group.task)
            self.no_signal_dropped += 1
            self._close(group)
        else:
            if verdict is Verdict.FLAG:
                group.no_signal = True
                self.no_signal_delivered += 1
            elif group.refill is not None and carries_signal(group.rewards()):
                self.signal_kept += 1
            group.phase = Phase.READY
            if not group.awaited:
                self.ready.append(group.group_id)
        return group

    def replace(
        self, dropped: GroupState, group_id: str, task: str, rollout_ids: tuple[str, ...]
    ) -> GroupState:
        """Take the group that takes the place of `dropped` (finished without signal,
        within its request's bound: `finish` said so), running `task` (its request's
        `Refill.next_task`). Not held to the capacity: it stands in for rollouts that
        just ended."""
        assert dropped.phase is Phase.NO_SIGNAL and dropped.refill is not None
        group = GroupState(
            group_id=group_id,
            request_id=dropped.request_id,
            task=task,
            rollout_ids=rollout_ids,
            max_staleness=dropped.max_staleness,
            metadata=dropped.metadata,
            agent=dropped.agent,
            refill=dropped.refill,
            replaces=dropped.replaces or dropped.group_id,
            dropped_before=dropped.dropped_before + 1,
        )
        dropped.replaced_by = group_id
        self.groups[group_id] = group
        for rollout_id in rollout_ids:
            self.by_rollout[rollout_id] = group_id
        self._open[group.request_id] += 1
        self._unfinished += group.n
        self.extra_rollouts += group.n
        return group

    def take(self, max_groups: int) -> list[GroupState]:
        """The oldest ready groups, still ready until acknowledged."""
        return [self.groups[g] for g in self.ready[:max_groups]]

    def ack(self, group_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """(acknowledged, unknown): a group not ready (unknown, running, already
        acknowledged) is reported, not an error, so a retried ack is harmless."""
        done, unknown = [], []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.phase is not Phase.READY:
                unknown.append(group_id)
                continue
            group.phase = Phase.DELIVERED
            if group_id in self.ready:  # an awaited group never was
                self.ready.remove(group_id)
            self.delivered += 1
            self._close(group)
            done.append(group_id)
        return done, unknown

    def cancel(self, group_id: str) -> GroupState | None:
        """Mark a group cancelled (its rollouts still end as rows); None if unknown. A
        group dropped for no signal stands for its replacement: that one is cancelled."""
        group = self.groups.get(group_id)
        while group is not None and group.replaced_by is not None:
            group = self.groups.get(group.replaced_by)
        if group is None:
            return None
        if group.phase in (Phase.RUNNING, Phase.READY):
            if group.phase is Phase.RUNNING:
                self._unfinished -= group.unfinished
            if group_id in self.ready:
                self.ready.remove(group_id)
            group.phase = Phase.CANCELLED
            self.cancelled += 1
            if not group.unfinished:
                self._close(group)
        return group

    def running_ids(self, group: GroupState) -> list[str]:
        if group.closed:
            return []
        return [r for r in group.rollout_ids if r not in group.records]

    def forget(self, now: float) -> None:
        """Forget the closed groups past the window or the count, and the request ids
        past theirs (see the module's docstring); `now` stamps what closed since the
        last call."""
        for group_id in self._closing:
            self._closed[group_id] = now
        self._closing.clear()
        while self._closed:
            group_id, closed_at = next(iter(self._closed.items()))
            if len(self._closed) <= self.retain_groups and now - closed_at < self.retain_s:
                break
            del self._closed[group_id]
            group = self.groups.pop(group_id)
            for rollout_id in group.rollout_ids:
                self.by_rollout.pop(rollout_id, None)
            self._open[group.request_id] -= 1
            if not self._open[group.request_id]:
                del self._open[group.request_id]
        if len(self.requests) - len(self._open) > self.request_ids:
            self._forget_requests()

    def _forget_requests(self) -> None:
        excess = len(self.requests) - len(self._open) - self.request_ids
        oldest_closed: list[str] = []
        for request_id in self.requests:  # oldest first; stops at once past the excess
            if len(oldest_closed) == excess:
                break
            if request_id not in self._open:
                oldest_closed.append(request_id)
        for request_id in oldest_closed:
            del self.requests[request_id]

    def _close(self, group: GroupState, *, keep_rows: bool = False) -> None:
        group.closed = True
        if not keep_rows:
            group.records = {}
        self._closing.append(group.group_id)
