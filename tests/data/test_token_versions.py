"""Per-position policy versions of a sequence, and the per-token staleness mask."""

from __future__ import annotations

from harbor_ray.data.token_versions import mask_stale, sequence_versions


def _turn(
    index: int,
    prompt: list[int],
    tokens: list[int],
    segments: list[tuple[int, int]] | None,
    start: int | None = None,
    rollout_id: str = "r",
) -> dict:
    return {
        "rollout_id": rollout_id,
        "index": index,
        "prompt_ids": prompt,
        "token_ids": tokens,
        "policy_version_start": start,
        "policy_segments": None
        if segments is None
        else [{"version": v, "offset": o} for v, o in segments],
    }


def test_each_turn_places_its_versions_after_its_own_prompt() -> None:
    # Turn 0: prompt [1, 2], sampled [3, 4, 5] (version 1 then 2 from offset 2);
    # turn 1 continues it with tool output [6] and samples [7, 8] at version 2.
    turns = [
        _turn(0, [1, 2], [3, 4, 5], [(1, 0), (2, 2)]),
        _turn(1, [1, 2, 3, 4, 5, 6], [7, 8], [(2, 0)]),
        _turn(0, [9], [9], [(7, 0)], rollout_id="other"),
    ]
    sequence = {"rollout_id": "r", "turns": [0, 1], "input_ids": [1, 2, 3, 4, 5, 6, 7, 8]}
    assert sequence_versions(sequence, turns) == [None, None, 1, 1, 2, None, 2, 2]


def test_a_turn_without_segments_is_its_start_version_or_unknown() -> None:
    sequence = {"rollout_id": "r", "turns": [0], "input_ids": [1, 2, 3]}
    assert sequence_versions(sequence, [_turn(0, [1], [2, 3], None, start=4)]) == [None, 4, 4]
    assert sequence_versions(sequence, [_turn(0, [1], [2, 3], None)]) == [None] * 3


def test_only_tokens_past_the_bound_leave_the_mask() -> None:
    mask = [0, 1, 1, 1, 0, 1]
    versions = [None, 1, 2, 3, None, 3]
    assert mask_stale(mask, versions, current=4, max_staleness=2) == [0, 0, 1, 1, 0, 1]
    assert mask_stale(mask, versions, current=4, max_staleness=0) == [0] * 6
    assert mask_stale([1], [None], current=9, max_staleness=0) == [1]  # unknown: kept
