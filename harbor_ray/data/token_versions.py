"""The policy version of every position of a sequence, and a loss mask without the stale.

A sequence (sequences/) is its leaf turn's prompt + sampled ids; each turn of its path
placed its sampled ids right after its own prompt (capture/core/graph.py), so position
`len(prompt_ids) + k` is that turn's sampled token k, and the turn's `policy_segments`
(turns/, schema 6) say which version sampled it. A turn without segments (rows written
before schema 6) counts every token as its `policy_version_start`'s.

`mask_stale` is the per-token staleness policy (`mask`): a token sampled more than
`max_staleness` versions before `current` trains nothing; the rest of its rollout does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harbor_ray.capture.core.policy_segments import token_versions

__all__ = ["mask_stale", "sequence_versions", "turn_segments"]


def sequence_versions(
    sequence: Mapping[str, Any], turns: Iterable[Mapping[str, Any]]
) -> list[int | None]:
    """The version of each of `sequence`'s `input_ids` (None where no version sampled
    it: the prompt, tool output, a turn with no version known). `turns` are turns/
    rows with `prompt_ids` in full; those of other rollouts are ignored."""
    by_index = {
        turn["index"]: turn for turn in turns if turn["rollout_id"] == sequence["rollout_id"]
    }
    versions: list[int | None] = [None] * len(sequence["input_ids"])
    for index in sequence["turns"]:
        turn = by_index.get(index)
        if turn is None or turn["prompt_ids"] is None or turn["token_ids"] is None:
            continue
        segments = turn_segments(turn)
        if segments is None:
            continue
        start, n = len(turn["prompt_ids"]), len(turn["token_ids"])
        versions[start : start + n] = token_versions(segments, n).tolist()
    return versions


def mask_stale(
    loss_mask: Sequence[int], versions: Sequence[int | None], current: int, max_staleness: int
) -> list[int]:
    """`loss_mask` with 0 on every token more than `max_staleness` versions before
    `current`; a token of no known version keeps its mask."""
    return [
        0 if v is not None and current - v > max_staleness else m
        for m, v in zip(loss_mask, versions, strict=True)
    ]


def turn_segments(turn: Mapping[str, Any]) -> Sequence[tuple[int, int]] | None:
    """(version, offset) of each run of a turn's sampled ids: the engine's own labels
    (`policy_segments`), else the version its call was forwarded at; None: no version."""
    segments = turn.get("policy_segments")
    if segments:
        return [(s["version"], s["offset"]) for s in segments]
    start = turn.get("policy_version_start")
    return None if start is None else [(start, 0)]
