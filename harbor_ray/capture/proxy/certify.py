"""Certify an engine before the first rollout: find its capture level, and refuse it
when that is below the level the run asks for.

docs/lessons.md: an endpoint that returns no token ids produces rollouts that look normal
and carry nothing trainable. So we ask for exactly what capture needs, once, and name
the request field or server flag that fixes whatever is missing. An engine that cannot
return ids may still be evaluated, but only when the run says so (`--capture`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harbor_ray.capture.core.capture_level import (
    CAPTURE_LEVELS,
    CaptureLevel,
    capture_fields,
    covers,
)
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.engine_adapter import EngineChoice, EngineKind, adapt_engine
from harbor_ray.capture.proxy.hosted import HostedUpstream, UpstreamKey, build_upstream
from harbor_ray.capture.proxy.sglang import TOOL_PARSER_FIX
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import CertificationError, EngineError

_PROBE_MESSAGES = [{"role": "user", "content": "Say OK."}]
_TOOL = {
    "type": "function",
    "function": {
        "name": "noop",
        "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}},
    },
}


class Certification(BaseModel):
    """What was learned about the engine; stored with every dataset made on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="The engine's API root.")
    served_model: str = Field(description="The model id requests are rewritten to.")
    models: list[str] = Field(description="Every model id the engine lists at /v1/models.")
    engine_version: str | None = Field(description="What /version reported, if anything.")
    # Defaults to `tokens`: a certification stored before the level existed was made of
    # an engine that returned ids (any other was refused).
    capture_level: CaptureLevel = Field(
        "tokens",
        description="What a model call can record: `tokens` (ids and logprobs: "
        "trainable), `logprobs` (logprobs, no ids) or `text` (neither).",
    )
    returns_token_ids: bool = Field(description="prompt_token_ids and token_ids came back.")
    returns_logprobs: bool = Field(description="Per-token logprobs came back.")
    tool_calling: bool = Field(
        description="tool_choice=auto was accepted and the tools reached the prompt."
    )
    tool_calling_fix: str | None = Field(
        description="What to change on the engine to enable tool calling, when it is off."
    )
    logprobs_mode: Literal["processed", "raw"] | None = Field(
        description="`processed`: the logprobs are those of the distribution sampled from "
        "(they change with the temperature; vLLM `logprobs_mode: processed_logprobs`). "
        "`raw`: the model's at temperature 1, whatever the sampling temperature (vLLM's "
        "default, `raw_logprobs`). None: the engine returns no logprobs."
    )
    engine_kind: EngineKind = Field(
        default="vllm",
        description="Which engine answered: `vllm`, or `sglang` (reached "
        "through the proxy's SGLang adapter; no stitched prompts).",
    )
    upstream: UpstreamName = Field(
        default="openai-chat",
        description="The API the engine was reached as "
        "(`--upstream`): an OpenAI-compatible chat server, or a hosted API in its own "
        "format (`anthropic`, `google`, `openai-responses`), probed in that format.",
    )


async def certify(
    engine: Engine,
    url: str,
    *,
    model: str | None = None,
    capture: CaptureLevel = "tokens",
    engine_kind: EngineKind = "vllm",
) -> Certification:
    """Probe `/v1/models` and one tiny completion; raise CertificationError if unusable,
    or if the engine's capture level is below `capture` (training needs `tokens`).
    `engine_kind`: which engine `engine` is (engine_adapter.py), recorded."""
    models, model = await _listed(engine, url, model)

    reply, level = await _capture_probe(engine, model)
    if not covers(level, capture):
        raise CertificationError(_refusal(url, capture, level, _capture_problems(reply)))

    tool_fix = await _tool_calling_fix(engine, model, level, _prompt_length(reply), engine_kind)
    logprobs_mode = None if level == "text" else await _logprobs_mode(engine, model)
    return Certification(
        url=url,
        served_model=model,
        models=models,
        engine_version=await _version(engine),
        capture_level=level,
        returns_token_ids=level == "tokens",
        returns_logprobs=level != "text",
        tool_calling=tool_fix is None,
        tool_calling_fix=tool_fix,
        logprobs_mode=logprobs_mode,
        engine_kind=engine_kind,
        upstream=engine.profile.name if isinstance(engine, HostedUpstream) else "openai-chat",
    )


async def certify_url(
    url: str | None,
    model: str | None = None,
    engine_kind: EngineChoice = "auto",
    *,
    capture: CaptureLevel = "tokens",
    upstream: UpstreamName = "openai-chat",
    key: UpstreamKey | None = None,
) -> Certification:
    """Certify the engine at `url` over HTTP, with a client of its own, through the
    adapter for `engine_kind` (`auto`: found from its answers; the certification says
    which), for the `capture` level; `upstream` and `key`: the API it is and its
    credential (hosted.py; `url` None: the profile's own address)."""
    engine = build_upstream(upstream, url, key=key)
    try:
        adapted = await adapt_engine(engine, engine_kind)
        return await certify(
            adapted.engine, engine.root, model=model, capture=capture, engine_kind=adapted.kind
        )
    finally:
        await engine.aclose()


async def reachable_url(
    url: str, model: str, *, upstream: UpstreamName = "openai-chat", key: UpstreamKey | None = None
) -> None:
    """That the engine at `url` answers here and lists `model`: what another node must
    check once the engine is certified (its replies are the same from anywhere; only
    the network path differs). Raises CertificationError otherwise."""
    engine = build_upstream(upstream, url, key=key)
    try:
        await _listed(engine, engine.root, model)
    finally:
        await engine.aclose()


async def _listed(engine: Engine, url: str, model: str | None) -> tuple[list[str], str]:
    """The engine's listed models and the one to use (`model`, or the first listed)."""
    try:
        listed = await engine.request("GET", "/v1/models")
    except EngineError as exc:
        raise CertificationError(f"cannot list models at {url}/v1/models: {exc.message}") from exc
    models = [str(m.get("id")) for m in listed.get("data", []) if isinstance(m, dict)]
    if model is None:
        if not models:
            raise CertificationError(f"{url}/v1/models lists no model; pass --model")
        model = models[0]
    elif models and model not in models:
        raise CertificationError(f"model {model!r} is not served at {url}; it serves {models}")
    return models, model


async def _capture_probe(engine: Engine, model: str) -> tuple[dict[str, Any], CaptureLevel]:
    """One tiny completion asking for each level's fields in turn, most first, and the
    level its reply shows. A level is what came back, not what was accepted: an engine
    that ignores `return_token_ids` answers without ids. One that refuses a field it does
    not know (a hosted API, 400) is asked again without it."""
    for asked in CAPTURE_LEVELS:
        probe = {
            "model": model,
            "messages": _PROBE_MESSAGES,
            "max_tokens": 1,
            "temperature": 0,
            **capture_fields(asked),
        }
        try:
            reply = await engine.request("POST", "/v1/chat/completions", probe)
        except EngineError as exc:
            if asked != "text" and exc.status in (400, 422):
                continue
            raise CertificationError(f"probe completion failed: {exc.message}") from exc
        return reply, _level_of(reply)
    raise AssertionError("the `text` probe asks for nothing an engine can refuse")


def _level_of(reply: dict[str, Any]) -> CaptureLevel:
    if _logprob_problems(reply):
        return "text"
    return "logprobs" if _id_problems(reply) else "tokens"


def _refusal(url: str, wanted: CaptureLevel, level: CaptureLevel, problems: list[str]) -> str:
    """Why the engine cannot serve `wanted`, what fixes it, and the mode it can serve."""
    use = "training" if wanted == "tokens" else f"--capture {wanted}"
    return (
        f"engine at {url} cannot be used for {use}: "
        + "; ".join(problems)
        + f". Its capture level is `{level}`: to evaluate it without training, pass "
        f"--capture {level}"
    )


def _prompt_length(reply: dict[str, Any]) -> int:
    """The probe's prompt length: its ids when it sent them, else its usage count."""
    ids = reply.get("prompt_token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    return int((reply.get("usage") or {}).get("prompt_tokens") or 0)


def _capture_problems(reply: dict[str, Any]) -> list[str]:
    return _id_problems(reply) + _logprob_problems(reply)


def _choice(reply: dict[str, Any]) -> dict[str, Any]:
    choices = reply.get("choices") or [{}]
    return choices[0] if isinstance(choices[0], dict) else {}


def _id_problems(reply: dict[str, Any]) -> list[str]:
    choice = _choice(reply)
    problems = []
    prompt_ids = reply.get("prompt_token_ids", choice.get("prompt_token_ids"))
    if not isinstance(prompt_ids, list) or not prompt_ids:
        problems.append(
            "no prompt_token_ids in the reply (needs vLLM >= 0.10 honouring the request "
            "field `return_token_ids: true`)"
        )
    if not isinstance(choice.get("token_ids"), list):
        problems.append(
            "no choices[0].token_ids in the reply (request field `return_token_ids: true` "
            "was ignored: use a vLLM OpenAI server, not a generic OpenAI-compatible one)"
        )
    return problems


def _logprob_problems(reply: dict[str, Any]) -> list[str]:
    content = (_choice(reply).get("logprobs") or {}).get("content")
    if isinstance(content, list) and content:
        return []
    return [
        "no choices[0].logprobs.content in the reply (request field `logprobs: true` "
        "was ignored; check the server does not disable logprobs, e.g. vLLM "
        "`--max-logprobs 0`)"
    ]


_TOOL_FLAGS_FIX: dict[EngineKind, str] = {
    "vllm": "start vLLM with --enable-auto-tool-choice --tool-call-parser <parser> "
    "(e.g. hermes); agents that use the text protocol (terminus-2) work without",
    "sglang": TOOL_PARSER_FIX,
}


async def _tool_calling_fix(
    engine: Engine,
    model: str,
    level: CaptureLevel,
    plain_prompt_len: int,
    engine_kind: EngineKind,
) -> str | None:
    """None if tool calling works; else what to change. `plain_prompt_len` is the prompt
    length of the same messages without tools."""
    probe = {
        "model": model,
        "messages": _PROBE_MESSAGES,
        "max_tokens": 1,
        "temperature": 0,
        "tools": [_TOOL],
        "tool_choice": "auto",
        **capture_fields(level),
    }
    try:
        reply = await engine.request("POST", "/v1/chat/completions", probe)
    except EngineError as exc:
        if "enable-auto-tool-choice" in exc.message or "tool-call-parser" in exc.message:
            return _TOOL_FLAGS_FIX[engine_kind]
        return f"tool calling failed: {exc.message}"
    # A template that ignores `tools` accepts them and the model never sees them: the
    # request succeeds and no call can come back.
    if _prompt_length(reply) <= plain_prompt_len:
        return (
            "the chat template ignores `tools` (the prompt did not grow): serve the model "
            "with a template that renders them (vLLM --chat-template)"
        )
    return None


async def _version(engine: Engine) -> str | None:
    try:
        return str((await engine.request("GET", "/version")).get("version"))
    except EngineError:
        return None


# Temperature scales every logit alike, so it never changes which token is likeliest,
# but a processed logprob moves with it (and a raw one does not). Half of 1 moves the
# top candidates' logprobs by far more than any batch's numeric noise.
_LOGPROBS_PROBE_TEMPERATURES = (1.0, 0.5)
_SAME_LOGPROB = 1e-3


async def _logprobs_mode(engine: Engine, model: str) -> Literal["processed", "raw"]:
    """Whether the engine's logprobs follow the sampling temperature: the same one-token
    probe at two temperatures, compared on the top candidates both list."""
    candidates = []
    for temperature in _LOGPROBS_PROBE_TEMPERATURES:
        probe = {
            "model": model,
            "messages": _PROBE_MESSAGES,
            "max_tokens": 1,
            "temperature": temperature,
            "top_p": 1.0,
            "logprobs": True,
            "top_logprobs": 5,
        }
        try:
            reply = await engine.request("POST", "/v1/chat/completions", probe)
            candidates.append(_top_logprobs(reply))
        except EngineError as exc:
            raise CertificationError(f"logprobs probe failed: {exc.message}") from exc
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise CertificationError(
                "no choices[0].logprobs.content[0].top_logprobs in the reply to a request "
                "with `top_logprobs: 5` (check the server's --max-logprobs)"
            ) from exc
    if sum(math.exp(lp) for lp in candidates[0].values()) > 1.01:
        raise CertificationError(
            "the engine returns logits, not logprobs (vLLM logprobs_mode raw_logits or "
            "processed_logits): serve with logprobs_mode processed_logprobs"
        )
    shared = candidates[0].keys() & candidates[1].keys()
    if not shared:
        raise CertificationError("the logprobs probe's two replies share no top candidate")
    moved = max(abs(candidates[0][t] - candidates[1][t]) for t in shared)
    return "processed" if moved > _SAME_LOGPROB else "raw"


def _top_logprobs(reply: dict[str, Any]) -> dict[str, float]:
    first = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    top = {str(c["token"]): float(c["logprob"]) for c in first}
    if not top:
        raise ValueError("no top_logprobs")
    return top
