"""A closed capture session: its turns, the graph built from them once, and the verdict.

This is what a session's owner hands on when the session ends (`close_capture`). Every
later view of the session reads this one record: the rollout's findings and counts, the
Arrow token tables of the dataset (`data.encode`), the JSON export document
(`export.render_export`). So the graph is built once per session, where the turns
live, and nothing downstream re-derives it from a serialised copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harbor_ray.capture.core.capture_level import CaptureLevel, lowest
from harbor_ray.capture.core.findings import Finding, is_trainable, validate
from harbor_ray.capture.core.graph import RolloutGraph, build_graph
from harbor_ray.capture.core.turn import TurnRecord

__all__ = ["CaptureCounts", "ClosedCapture", "close_capture"]


@dataclass(frozen=True)
class CaptureCounts:
    """How many of each thing the session holds (the `counts` of a rollouts/ row)."""

    turns: int
    roots: int
    agent_roots: int
    sequences: int
    discarded: int
    engine_errors: int
    budget_stops: int
    # Turns whose call was sent again after a rate limit (TurnRecord.upstream_retries);
    # 0 in rows written before schema version 8, which did not count them.
    retried_calls: int = 0


@dataclass(frozen=True, eq=False)
class ClosedCapture:
    """One ended session: `turns` in index order, their graph, counts and findings."""

    turns: tuple[TurnRecord, ...]
    graph: RolloutGraph
    counts: CaptureCounts
    findings: tuple[Finding, ...]

    @property
    def capture_level(self) -> CaptureLevel:
        """What its turns recorded (capture_level.py); `tokens` for a session without."""
        return lowest([t.capture_level for t in self.turns])

    @property
    def valid(self) -> bool:
        """No fatal finding: the capture holds what its level records."""
        return is_trainable(self.findings)

    @property
    def trainable(self) -> bool:
        """Valid, and captured at the `tokens` level: what a trainer may use."""
        return self.valid and self.capture_level == "tokens"


def close_capture(
    turns: Sequence[TurnRecord],
    *,
    vocab_size: int | None = None,
    engine_errors: int = 0,
    budget_stops: int = 0,
) -> ClosedCapture:
    """Link and validate one session's turns (any order) into its closed record."""
    ordered = tuple(sorted(turns, key=lambda t: t.index))
    graph = build_graph(ordered)
    findings = validate(
        ordered,
        graph,
        vocab_size=vocab_size,
        engine_errors=engine_errors,
        budget_stops=budget_stops,
    )
    counts = CaptureCounts(
        turns=len(ordered),
        roots=len(graph.roots),
        agent_roots=len(graph.agent_roots),
        sequences=len(graph.sequences),
        discarded=len(graph.discarded),
        engine_errors=engine_errors,
        budget_stops=budget_stops,
        retried_calls=sum(1 for t in ordered if t.upstream_retries),
    )
    return ClosedCapture(ordered, graph, counts, findings)
