"""Which engine answers at a URL, and the `Engine` the proxy talks to for it.

The proxy speaks vLLM's shapes (`return_token_ids`, `prompt_token_ids`, prompts as ids
through `kv_transfer_params`). Another engine gets an adapter that translates at this
seam (sglang.py), so nothing past it knows which engine it is. The kind is found from
what the server answers: SGLang's model cards are `owned_by: "sglang"`, and it serves
its native `/get_model_info` (vLLM has neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from harbor_ray.capture.proxy.sglang import SglangEngine
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import EngineError

EngineKind = Literal["vllm", "sglang"]
# What a user may ask for: one kind, or `auto` (found from the server's answers).
EngineChoice = Literal["auto", "vllm", "sglang"]


@dataclass(frozen=True)
class AdaptedEngine:
    """The engine as the proxy calls it, what it is, and whether it takes stitched
    prompts (continuation)."""

    engine: Engine
    kind: EngineKind
    stitch: bool


async def adapt_engine(engine: Engine, kind: EngineChoice = "auto") -> AdaptedEngine:
    """`engine` behind the adapter for `kind` (`auto`: found from its answers)."""
    found = await detect_engine_kind(engine) if kind == "auto" else kind
    if found == "sglang":
        return AdaptedEngine(SglangEngine(engine), "sglang", stitch=False)
    return AdaptedEngine(engine, "vllm", stitch=True)


async def detect_engine_kind(engine: Engine) -> EngineKind:
    """`sglang` when the server answers as SGLang does; else `vllm` (whose certification
    then names whatever is missing)."""
    try:
        listed = await engine.request("GET", "/v1/models")
    except EngineError:
        listed = {}
    if any(_owned_by_sglang(card) for card in listed.get("data") or []):
        return "sglang"
    try:
        info = await engine.request("GET", "/get_model_info")
    except EngineError:
        return "vllm"
    return "sglang" if "model_path" in info else "vllm"


def _owned_by_sglang(card: Any) -> bool:
    return isinstance(card, dict) and card.get("owned_by") == "sglang"
