"""Which policy version sampled which tokens of one model call: its segments.

A turn's segments are `(version, offset)` pairs in increasing offset order, the first at
offset 0: version `v` sampled the turn's tokens from `offset` to the next segment's
offset (or the end). A call that no weight update crossed has one segment. They come
from the engine's reply (`weight_versions` on the choice: vLLM's spans `[start, end)`
labelled with the version `harbor_ray.engine.versions.VersionedServer` set), and
without it from the version the edge knew when it forwarded the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

PolicySegments = tuple[tuple[int, int], ...]
"""((version, first output offset), ...)"""

__all__ = ["PolicySegments", "compact", "expand", "segments_from_spans", "token_versions"]


def segments_from_spans(spans: Any, start_version: int | None) -> PolicySegments | None:
    """The segments of a reply's `weight_versions` spans (each `{"version", "start",
    "end"}`); a span whose label is no integer (an engine that was never labelled) is
    `start_version`'s. Without spans: one segment of `start_version`, or None when the
    edge knew no version either. Spans that say nothing usable count as none."""
    segments: list[tuple[int, int]] = []
    for span in spans if isinstance(spans, list) else ():
        try:
            version = _label(span["version"], start_version)
            start, end = int(span["start"]), int(span["end"])
        except (KeyError, TypeError, ValueError):
            return _fallback(start_version)
        if version is None or end <= start:
            continue
        if segments and segments[-1][0] == version:
            continue  # the same weights, relabelled: one segment
        segments.append((version, start))
    if not segments:
        return _fallback(start_version)
    # The first segment starts the turn even if the engine's first span is empty.
    return ((segments[0][0], 0), *segments[1:])


def compact(segments: PolicySegments | None, start_version: int | None) -> PolicySegments | None:
    """None for the common case, every token of the version the call was forwarded at:
    a turn is kept for its rollout's life, and a tuple is one more object for every
    pass of the garbage collector to walk. `expand` gives them back."""
    return None if segments == _fallback(start_version) else segments


def expand(segments: PolicySegments | None, start_version: int | None) -> PolicySegments | None:
    """A turn's segments in full (`compact`'s inverse)."""
    return _fallback(start_version) if segments is None else segments


def token_versions(segments: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """The version of each of a turn's `n` sampled tokens (int64)."""
    versions = np.empty(n, dtype=np.int64)
    bounds = [min(int(offset), n) for _, offset in segments[1:]] + [n]
    start = 0
    for (version, _), end in zip(segments, bounds, strict=True):
        versions[start:end] = version
        start = max(start, end)
    return versions


def _label(label: Any, default: int | None) -> int | None:
    try:
        return int(label)
    except (TypeError, ValueError):
        return default


def _fallback(start_version: int | None) -> PolicySegments | None:
    return None if start_version is None else ((start_version, 0),)
