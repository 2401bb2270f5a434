"""What one harness's wiring is (`AgentKind`), and the builders the wiring table is
written with: apart from the table (agent_table.py), so that the table reads as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from harbor.models.model_api_format import ModelApiFormat

from harbor_ray.capture.core.dialects.base import DialectName

__all__ = ["FORMATS", "PROFILES", "AgentKind", "Channel", "Runs", "installed", "unwired"]

Runs = Literal["host", "sandbox"]
# How a config reaches the proxy: "none" (no model), "litellm" (terminus-2 on the host),
# "connection" (Harbor's connection layer, installed agents), "openai_env" (import paths).
Channel = Literal["none", "litellm", "connection", "openai_env"]

# A profile is named by the API its dialect is: what `--profile` takes.
PROFILES: Mapping[DialectName, str] = MappingProxyType(
    {
        "chat": "openai-chat",
        "responses": "openai-responses",
        "anthropic": "anthropic",
        "google": "google",
    }
)

FORMATS: Mapping[DialectName, ModelApiFormat] = MappingProxyType(
    {
        "chat": ModelApiFormat.OPENAI_CHAT_COMPLETIONS,
        "responses": ModelApiFormat.OPENAI_RESPONSES,
        "anthropic": ModelApiFormat.ANTHROPIC_MESSAGES,
        "google": ModelApiFormat.GOOGLE_GENERATE_CONTENT,
    }
)
# Per dialect: the model prefix that makes Harbor (LiteLLM's parser) pick the provider,
# the provider's canonical key variable, and the path the client appends its routes to.
# OpenAI clients take a base that ends in /v1; Anthropic and Google clients add
# /v1/messages and /v1beta/models themselves.
_DIALECT_DEFAULTS: Mapping[DialectName, tuple[str, str, str]] = MappingProxyType(
    {
        "chat": ("openai/", "OPENAI_API_KEY", "/v1"),
        "responses": ("openai/", "OPENAI_API_KEY", "/v1"),
        "anthropic": ("anthropic/", "ANTHROPIC_API_KEY", ""),
        "google": ("gemini/", "GEMINI_API_KEY", ""),
    }
)


@dataclass(frozen=True)
class AgentKind:
    """One Harbor agent: where it runs, what it speaks, and how it is wired (if it is)."""

    name: str
    runs: Runs
    needs_model: bool = True
    dialect: DialectName | None = None
    channel: Channel | None = None  # None: not wired
    note: str = ""  # why it is not wired, or what is special about its wiring
    model_prefix: str = ""
    key_env: str = ""
    url_path: str = ""
    # Set AgentConfig.model_api_format: for agents whose client would otherwise choose
    # its own protocol (opencode's built-in openai provider speaks Responses, ...).
    pin_dialect: bool = False
    # Variables set for this agent, over anything the host has (explicit env wins): the
    # switches that would move it off its API key (OAuth, auth.json, Vertex, Bedrock),
    # and flags its adapter insists on.
    pinned_env: tuple[tuple[str, str], ...] = ()
    # Variables naming the agent's small/fast model slots, set to AUX_MODEL.
    aux_env: tuple[str, ...] = ()
    # Agent kwargs the wiring sets: its small/fast slots where a config file holds them,
    # the API it speaks where Harbor's connection layer will not pin that format.
    wired_kwargs: Mapping[str, Any] = MappingProxyType({})
    # For an agent Harbor gives no endpoint override (it refuses a base_url): the agent
    # kwarg that takes the proxy's URL (its harbor_ray variant or the adapter applies it,
    # trials/preinstalled.py), and the one that takes the name of the key's variable.
    url_kwarg: str = ""
    key_env_kwarg: str = ""

    @property
    def wired(self) -> bool:
        return self.channel is not None

    @property
    def profile(self) -> str | None:
        return PROFILES[self.dialect] if self.dialect else None


def installed(
    name: str,
    dialect: DialectName,
    *,
    url_path: str | None = None,
    model_prefix: str | None = None,
    key_env: str | None = None,
    pin_dialect: bool = False,
    pinned_env: Mapping[str, str] | None = None,
    aux_env: tuple[str, ...] = (),
    wired_kwargs: Mapping[str, Any] | None = None,
    url_kwarg: str = "",
    key_env_kwarg: str = "",
    note: str = "",
) -> AgentKind:
    prefix, key, path = _DIALECT_DEFAULTS[dialect]
    return AgentKind(
        name=name,
        runs="sandbox",
        dialect=dialect,
        channel="connection",
        note=note,
        model_prefix=prefix if model_prefix is None else model_prefix,
        key_env=key if key_env is None else key_env,
        url_path=path if url_path is None else url_path,
        pin_dialect=pin_dialect,
        pinned_env=tuple(sorted((pinned_env or {}).items())),
        aux_env=aux_env,
        wired_kwargs=MappingProxyType(dict(wired_kwargs or {})),
        url_kwarg=url_kwarg,
        key_env_kwarg=key_env_kwarg,
    )


def unwired(name: str, runs: Runs, note: str) -> AgentKind:
    return AgentKind(name=name, runs=runs, note=note)
