"""Which policy version sampled which tokens of a call, from the engine's spans."""

from __future__ import annotations

import pytest

from harbor_ray.capture.core.completion import parse_engine_reply
from harbor_ray.capture.core.policy_segments import (
    compact,
    expand,
    segments_from_spans,
    token_versions,
)


def span(version: str, start: int, end: int) -> dict:
    return {"version": version, "start": start, "end": end}


def test_a_call_an_update_crossed_has_a_segment_per_version() -> None:
    spans = [span("3", 0, 5), span("4", 5, 9)]
    assert segments_from_spans(spans, 3) == ((3, 0), (4, 5))
    assert token_versions(((3, 0), (4, 5)), 9).tolist() == [3] * 5 + [4] * 4


def test_the_engine_label_wins_over_the_edge_stamp() -> None:
    # Forwarded at 3 but queued behind the update's pause: every token is version 4's.
    assert segments_from_spans([span("4", 0, 7)], 3) == ((4, 0),)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        (None, ((2, 0),)),  # no spans (another engine): the edge's version for every token
        ([], ((2, 0),)),
        ([span("default", 0, 4)], ((2, 0),)),  # an engine never labelled
        ([span("2", 0, 0), span("5", 0, 3)], ((5, 0),)),  # an empty span says nothing
        ([span("2", 0, 2), span("2", 2, 4)], ((2, 0),)),  # relabelled, same version
        ([{"version": "2"}], ((2, 0),)),  # unusable: as if none
        ("nonsense", ((2, 0),)),
    ],
)
def test_spans_that_say_less_fall_back_to_the_edge(spans, expected) -> None:
    assert segments_from_spans(spans, 2) == expected


def test_no_version_known_is_none() -> None:
    assert segments_from_spans(None, None) is None
    assert segments_from_spans([span("1", 0, 2), span("2", 2, 3)], None) == ((1, 0), (2, 2))


def test_segments_past_the_end_are_clipped() -> None:
    assert token_versions(((1, 0), (2, 9)), 3).tolist() == [1, 1, 1]
    assert token_versions(((1, 0),), 0).tolist() == []


def test_the_reply_parser_keeps_the_spans_as_sent() -> None:
    spans = [span("0", 0, 1), span("1", 1, 2)]
    completion = parse_engine_reply(
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                    "token_ids": [5, 6],
                    "weight_versions": spans,
                }
            ]
        }
    )
    assert completion.weight_versions == spans


def test_a_turn_keeps_none_for_one_segment_at_its_start_version() -> None:
    assert compact(((3, 0),), 3) is None and expand(None, 3) == ((3, 0),)
    assert compact(((4, 0),), 3) == ((4, 0),)  # queued behind an update: kept
    assert compact(((3, 0), (4, 2)), 3) == ((3, 0), (4, 2))
    assert compact(None, None) is None and expand(None, None) is None
