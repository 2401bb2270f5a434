"""The engines' load, read from the Prometheus text vLLM serves at `/metrics`.

vLLM 0.32 exports `vllm:kv_cache_usage_perc` (a gauge, 1 is a full KV cache; older
releases named it `vllm:gpu_cache_usage_perc`), `vllm:num_requests_running`,
`vllm:num_requests_waiting` and the counter `vllm:num_preemptions` (read as
`vllm:num_preemptions_total`). Under Ray Serve LLM with `log_engine_metrics` the same
metrics reach Ray's metrics endpoint renamed for OpenTelemetry (`:` becomes `_`) and
prefixed by Ray (`ray_vllm_num_requests_waiting`): both spellings are read. Pure: text
in, one `EngineLoad` out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

# The name as vLLM declares it -> the field of EngineLoad it feeds.
_KV_USAGE = ("kv_cache_usage_perc", "gpu_cache_usage_perc")
_RUNNING = "num_requests_running"
_WAITING = "num_requests_waiting"
_PREEMPTIONS = "num_preemptions"
# `name{labels} value [timestamp]`; label values may hold spaces, so the braces are
# matched whole.
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")


@dataclass(frozen=True)
class EngineLoad:
    """What the engines report at one moment, every replica together."""

    kv_cache_usage: float = 0.0  # the fullest replica's KV cache, 0..1
    running: int = 0  # requests the engines are decoding, summed
    waiting: int = 0  # requests queued inside the engines, summed
    preemptions: float = 0.0  # cumulative preemptions, summed (a counter)


def metrics_url(llm_url: str) -> str:
    """Where an engine served at `llm_url` (`vllm serve`, any path under it) answers
    `/metrics`: the root of its origin."""
    parts = urlsplit(llm_url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def vllm_name(name: str) -> str | None:
    """The vLLM metric a Prometheus name is, without its prefix and `_total`; None for
    any other metric."""
    for prefix in ("vllm:", "ray_vllm_", "vllm_"):
        if name.startswith(prefix):
            bare = name[len(prefix) :]
            return bare.removesuffix("_total")
    return None


def parse_engine_metrics(texts: Iterable[str]) -> EngineLoad:
    """One load from the `/metrics` texts of every replica (several label sets each:
    one per engine and model)."""
    kv, running, waiting, preemptions = 0.0, 0.0, 0.0, 0.0
    for text in texts:
        for line in text.splitlines():
            if not line or line.startswith("#") or (match := _SAMPLE.match(line)) is None:
                continue
            name = vllm_name(match.group(1))
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            if name is None or not math.isfinite(value):
                continue
            if name in _KV_USAGE:
                kv = max(kv, value)
            elif name == _RUNNING:
                running += value
            elif name == _WAITING:
                waiting += value
            elif name == _PREEMPTIONS:
                preemptions += value
    return EngineLoad(
        kv_cache_usage=kv, running=int(running), waiting=int(waiting), preemptions=preemptions
    )
