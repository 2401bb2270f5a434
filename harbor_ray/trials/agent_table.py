"""The harness wiring table: every Harbor agent, where it runs, the dialect it speaks,
and how it is pointed at the capture proxy, for its default profile (`AGENTS`) and the
others it is wired to speak (`WIRINGS`). Data only: trials/agents.py reads it.

Why each agent is wired as it is: docs/agents.md, "Wiring an agent to the proxy".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from harbor.models.model_api_format import ModelApiFormat

from harbor_ray.capture.core.dialects.base import DialectName

__all__ = [
    "AGENTS",
    "AUX_MODEL",
    "DEFAULT_CONTEXT_WINDOW",
    "FORMATS",
    "PROFILES",
    "WIRINGS",
    "AgentKind",
    "Channel",
    "Runs",
]

Runs = Literal["host", "sandbox"]
# How a config reaches the proxy: "none" (no model), "litellm" (terminus-2 on the host),
# "connection" (Harbor's connection layer, installed agents), "openai_env" (import paths).
Channel = Literal["none", "litellm", "connection", "openai_env"]

# The model name of every agent's small/fast/title slot: not the served model's name, so
# that the proxy tells the calls made through those slots from the agent's main loop.
AUX_MODEL = "harbor-aux"

# SmolLM2-135M-Instruct, the default served model, has an 8192-token context.
DEFAULT_CONTEXT_WINDOW = 8192

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


def _installed(
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


def _unwired(name: str, runs: Runs, note: str) -> AgentKind:
    return AgentKind(name=name, runs=runs, note=note)


_OPENCODE_PROVIDER = "harbor"
_COPILOT_OFFLINE: Mapping[str, str] = MappingProxyType({"COPILOT_OFFLINE": "true"})
_OPENCODE_AUX: Mapping[str, Any] = MappingProxyType(
    {
        "opencode_config": {
            "small_model": f"{_OPENCODE_PROVIDER}/{AUX_MODEL}",
            "provider": {_OPENCODE_PROVIDER: {"models": {AUX_MODEL: {}}}},
        }
    }
)


# NeMo Fabric runs one of its adapters' harnesses in the sandbox: mini-swe-agent's, which
# its pin installs (LiteLLM there picks the provider from the model's prefix). Harbor
# gives it no endpoint override: the URL and the key's variable are Fabric options. Its
# workspace is the Harbor tasks' /app (Harbor's default, /testbed, is SWE-bench's).
# mini-swe-agent fails a call whose cost LiteLLM cannot price (no served model is in its
# map), and LiteLLM fetches that map from the network at import: neither here.
_FABRIC_KWARGS: Mapping[str, Any] = MappingProxyType(
    {
        "fabric_adapter_id": "nvidia.fabric.mini-swe-agent",
        "fabric_python": "/opt/fabric-venv/bin/python",
        "fabric_workspace": "/app",
    }
)


def _fabric(
    dialect: DialectName, *, model_prefix: str | None = None, url_path: str | None = None
) -> AgentKind:
    return _installed(
        "fabric",
        dialect,
        model_prefix=model_prefix,
        url_path=url_path,
        url_kwarg="fabric_model_base_url",
        key_env_kwarg="fabric_model_api_key_env",
        pinned_env={"MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        wired_kwargs=_FABRIC_KWARGS,
        note="adapter nvidia.fabric.mini-swe-agent; fabric_model_base_url, "
        "fabric_model_api_key_env",
    )


# Harbor's langgraph adapter copies these from the host into the sandbox when the config
# does not set them (its _FORWARDED_ENV_VARS: provider keys, LangSmith's key and
# endpoint): set empty, so that no host credential reaches a rollout; the session key is
# set over its own variable.
_LANGGRAPH_UNFORWARDED: Mapping[str, str] = MappingProxyType(
    dict.fromkeys(
        (
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GOOGLE_API_KEY",
            "FIREWORKS_API_KEY",
            "OPENROUTER_API_KEY",
            "BASETEN_API_KEY",
            "GROQ_API_KEY",
            "XAI_API_KEY",
            "NVIDIA_API_KEY",
            "OLLAMA_API_KEY",
            "OLLAMA_HOST",
            "LANGSMITH_API_KEY",
            "LANGSMITH_TRACING",
            "LANGSMITH_TRACING_V2",
            "LANGSMITH_PROJECT",
            "LANGSMITH_WORKSPACE_ID",
            "LANGSMITH_PROFILE",
            "LANGSMITH_ENDPOINT",
            "LANGSMITH_DATASET",
            "HARBOR_LANGSMITH_PARENT",
            "HARBOR_LANGSMITH_BAGGAGE",
        ),
        "",
    )
)

_NO_CONNECTION = "Harbor 0.25 gives it no endpoint override (no MODEL_CONNECTION)"
_CLINE_URL = "provider_base_url"
# The sample Strands agent (a factory Harbor's strands runner imports in the sandbox).
_STRANDS_SAMPLE: Mapping[str, Any] = MappingProxyType(
    {
        "factory_path": str(Path(__file__).parents[1] / "samples" / "strands_agent"),
        "factory": "agent:create_agent",
    }
)


def _aider_weak(prefix: str) -> Mapping[str, str]:
    """aider's weak model (its commit messages) through the same LiteLLM provider."""
    return {"AIDER_WEAK_MODEL": f"{prefix}{AUX_MODEL}"}


_NO_BASE_URL = "Harbor 0.25's adapter cannot override its base URL (capabilities.base_url)"

# Every name in Harbor 0.25's AgentFactory._AGENT_MAP (a test keeps the two equal).
_TABLE = (
    AgentKind("oracle", "host", needs_model=False, channel="none", note="runs the task's solution"),
    AgentKind("nop", "host", needs_model=False, channel="none", note="does nothing"),
    AgentKind(
        "terminus-2",
        "host",
        dialect="chat",
        channel="litellm",
        model_prefix="openai/",
        url_path="/v1",
        note="LiteLLM on the host; key in llm_kwargs, never in the sandbox",
    ),
    # Its background calls (titles, topic checks) use the small/fast (haiku) slot.
    _installed(
        "claude-code",
        "anthropic",
        pinned_env={
            "CLAUDE_FORCE_OAUTH": "0",
            "CLAUDE_CODE_OAUTH_TOKEN": "",
            "CLAUDE_CODE_USE_BEDROCK": "0",
            "AWS_BEARER_TOKEN_BEDROCK": "",
        },
        aux_env=("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"),
    ),
    _installed(
        "codex",
        "responses",
        pinned_env={
            "CODEX_AUTH_JSON_PATH": "",
            "CODEX_FORCE_AUTH_JSON": "0",
        },
        note="Harbor writes the URL into config.toml (openai_base_url)",
    ),
    _installed(
        "gemini-cli",
        "google",
        pinned_env={
            "GEMINI_OAUTH_CREDS_PATH": "",
            "GEMINI_FORCE_OAUTH": "0",
            "GOOGLE_GENAI_USE_VERTEXAI": "0",
        },
    ),
    _installed(
        "antigravity-cli",
        "google",
        pinned_env={"HARBOR_ALLOW_INSECURE_MODEL_BASE_URL": "true"},
        note="Harbor refuses a plain-http URL unless allowed explicitly",
    ),
    # Its Go harness (in the google-antigravity wheel) speaks Gemini's API only.
    _installed(
        "antigravity-sdk",
        "google",
        pinned_env={"HARBOR_ALLOW_INSECURE_MODEL_BASE_URL": "true"},
        note="GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY; Harbor refuses a plain-http "
        "URL unless allowed explicitly",
    ),
    # Its provider is not called `openai`: opencode sends that one's calls to the
    # Responses API whatever the npm package; `small_model` is its title generator's.
    _installed(
        "opencode",
        "chat",
        pin_dialect=True,
        model_prefix=f"{_OPENCODE_PROVIDER}/",
        wired_kwargs=_OPENCODE_AUX,
        note=f"provider {_OPENCODE_PROVIDER!r} (@ai-sdk/openai-compatible) in "
        "opencode.json, key {env:OPENAI_API_KEY}",
    ),
    _installed(
        "mimo",
        "chat",
        pin_dialect=True,
        note="provider baseURL and {env:OPENAI_API_KEY} in mimocode.json",
    ),
    _installed(
        "kimi-cli", "chat", note="config file written in the sandbox from RUNTIME_KIMI_API_KEY"
    ),
    _installed("kimi-code", "chat", note="KIMI_MODEL_BASE_URL, KIMI_MODEL_API_KEY"),
    _installed("mini-swe-agent", "chat", note="LiteLLM in the sandbox"),
    _installed("swe-agent", "chat", note="LiteLLM in the sandbox"),
    # Its weak model writes the commit messages of its auto-commits: a side call.
    _installed(
        "aider",
        "chat",
        pinned_env=_aider_weak("openai/"),
        note="LiteLLM in the sandbox; api_base in its model settings file",
    ),
    _installed("openhands", "chat", note="LLM_BASE_URL, LLM_API_KEY (LiteLLM)"),
    _installed("openhands-sdk", "chat", note="LLM_BASE_URL, LLM_API_KEY (LiteLLM)"),
    _installed("qwen-coder", "chat"),
    _installed(
        "goose",
        "chat",
        url_path="",
        note="OPENAI_HOST is the server root: goose appends v1/chat/completions",
    ),
    _installed("hermes", "chat", pin_dialect=True),
    # Offline: no GitHub sign-in, telemetry or update check (a sandbox has no network);
    # the model calls still go to COPILOT_PROVIDER_BASE_URL.
    _installed(
        "copilot-cli", "chat", pinned_env=_COPILOT_OFFLINE, note="COPILOT_PROVIDER_* variables"
    ),
    # Its models.json key names a variable: PreinstalledPi writes it as the pinned pi reads it.
    _installed("pi", "chat", pin_dialect=True, note="provider in models.json"),
    # The openai/ prefix picks vibe's generic (OpenAI-compatible) backend, whose key
    # variable is OPENAI_API_KEY; its native mistral backend would go to api.mistral.ai.
    _installed("vibe", "chat", note="generic backend: provider in config.toml"),
    _installed("mcode", "chat", note="provider added with `mcode provider add`"),
    _installed("nemo-agent", "chat", note="key and URL in the NAT workflow config"),
    _installed("grok-build", "responses", note="model entry in ~/.grok/config.toml"),
    _installed("trae-agent", "responses", note="key and URL in trae_config.yaml"),
    _installed(
        "muse-code",
        "responses",
        model_prefix="meta/",
        key_env="META_API_KEY",
        note="Meta provider: META_API_KEY, --base-url",
    ),
    _installed(
        "code-puppy", "chat", pin_dialect=True, note="custom_openai endpoint in extra_models.json"
    ),
    # Harbor 0.25 pins no API for its providers: openclaw.json names it. Its memory search
    # keeps to keywords: by default it embeds through /v1/embeddings, which an engine
    # serving a chat model does not offer. The tools denied are those whose state
    # openclaw reports in a transient message at the end of every request, which the
    # next request drops: with them each turn would start a new root.
    _installed(
        "openclaw",
        "chat",
        wired_kwargs={
            "openclaw_config": {
                "models": {"providers": {"openai": {"api": "openai-completions"}}},
                "memory": {"search": {"provider": "none"}},
                "tools": {
                    "deny": [
                        "process",
                        "sessions_spawn",
                        "image_generate",
                        "music_generate",
                        "video_generate",
                    ]
                },
            }
        },
        pinned_env={"OPENAI_BASE_URL": ""},  # else its run forwards the host's
        note="provider baseUrl and ${OPENAI_API_KEY} in openclaw.json",
    ),
    _installed("fx", "chat", note="runtime provider in ~/.fx/settings.json (setup)"),
    _fabric("chat"),
    # A user's own LangGraph project (`project_path`, langgraph.json); its graph builds
    # its model from what Harbor resolves (LangChain's init_chat_model, the provider
    # from the model's prefix). harbor-ray qualifies it with samples/langgraph.
    _installed(
        "langgraph",
        "chat",
        pinned_env=_LANGGRAPH_UNFORWARDED,
        note="a user's LangGraph project (project_path); model and base URL in its configurable",
    ),
    _unwired("acp", "sandbox", "a generic ACP client; the agent it launches decides"),
    # Harbor's adapter refuses a base URL; its variant stores the proxy's for the run's
    # provider with `cline auth -b` before the task (PreinstalledClineCli).
    _installed(
        "cline-cli",
        "chat",
        url_kwarg=_CLINE_URL,
        note="`cline auth -b URL` before the run (provider_base_url)",
    ),
    _unwired("junie", "sandbox", _NO_BASE_URL),
    _unwired("cursor-cli", "sandbox", f"Cursor's own service only; {_NO_CONNECTION}"),
    _unwired("cortex-code", "sandbox", f"Snowflake Cortex only; {_NO_CONNECTION}"),
    _unwired("devin", "sandbox", f"Devin's own service only; {_NO_CONNECTION}"),
    _unwired("rovodev-cli", "sandbox", f"Atlassian's service only; {_NO_CONNECTION}"),
    _unwired("eve", "sandbox", _NO_CONNECTION),
    _unwired("fx-dev", "sandbox", "fx built from source; its setup is not verified"),
    _unwired(
        "deerflow",
        "sandbox",
        "forwards the host's provider and web-search API keys into the sandbox",
    ),
    # Harbor runs a user's Strands agent factory: harbor_ray's sample one unless the
    # rollout's kwargs name another (factory_path, factory).
    _installed(
        "strands",
        "chat",
        wired_kwargs=_STRANDS_SAMPLE,
        note="OpenAIModel client_args base_url; harbor_ray's sample factory",
    ),
    _unwired("computer-1", "host", "a computer-use agent: needs a desktop and a vision model"),
    _unwired(
        "dspy-rlm",
        "host",
        "needs dspy (not a harbor_ray dependency) and a Deno "
        "runner that imports deno.land, unreachable here (qualify/harnesses.py)",
    ),
)

AGENTS: Mapping[str, AgentKind] = MappingProxyType({kind.name: kind for kind in _TABLE})

# Google clients that take a base holding the API version (LiteLLM's gemini provider,
# @ai-sdk/google, pi's google provider) append only models/<model>:generateContent.
_GOOGLE_VERSIONED = "/v1beta"

# The profiles an agent speaks besides its default one (AGENTS), each wired as it needs.
_OTHER_PROFILES = (
    # LiteLLM picks the provider by the model's prefix; `openai/responses/` sends a chat
    # call to the Responses API.
    AgentKind(
        "terminus-2",
        "host",
        dialect="responses",
        channel="litellm",
        model_prefix="openai/responses/",
        url_path="/v1",
    ),
    AgentKind(
        "terminus-2", "host", dialect="anthropic", channel="litellm", model_prefix="anthropic/"
    ),
    AgentKind(
        "terminus-2",
        "host",
        dialect="google",
        channel="litellm",
        model_prefix="gemini/",
        url_path=_GOOGLE_VERSIONED,
    ),
    _installed(
        "opencode",
        "anthropic",
        pin_dialect=True,
        url_path="/v1",
        model_prefix=f"{_OPENCODE_PROVIDER}/",
        key_env="OPENAI_API_KEY",
        wired_kwargs=_OPENCODE_AUX,
    ),
    # Its built-in google provider; Harbor writes opencode's own key variable into the
    # provider's options, so the key goes there, not under Google's name.
    _installed(
        "opencode",
        "google",
        model_prefix="google/",
        url_path=_GOOGLE_VERSIONED,
        key_env="OPENAI_API_KEY",
    ),
    # Its built-in `openai` provider speaks Responses; Harbor will not pin that format
    # for opencode, nor does it need to.
    _installed("opencode", "responses"),
    _installed("pi", "responses", pin_dialect=True),
    _installed("pi", "anthropic", pin_dialect=True),
    # Harbor 0.25 refuses to pin Google's format for pi, yet writes the API pi is given
    # (`model_api`) into its models.json as it is.
    _installed(
        "pi",
        "google",
        model_prefix="openai/",
        key_env="OPENAI_API_KEY",
        url_path=_GOOGLE_VERSIONED,
        wired_kwargs={"model_api": "google-generative-ai"},
    ),
    _installed("mini-swe-agent", "responses", pin_dialect=True),
    _installed("mini-swe-agent", "anthropic"),
    _installed("mini-swe-agent", "google", url_path=_GOOGLE_VERSIONED),
    # LiteLLM in the sandbox, as mini-swe-agent: the model's prefix picks the provider;
    # the pinned Responses format sets the SDK's api_mode.
    _installed("openhands-sdk", "responses", pin_dialect=True),
    _installed("openhands-sdk", "anthropic"),
    _installed("openhands-sdk", "google", url_path=_GOOGLE_VERSIONED),
    _installed("code-puppy", "responses", pin_dialect=True),
    _installed("code-puppy", "anthropic", pin_dialect=True),
    # Its native anthropic client (KIMI_MODEL_PROVIDER_TYPE=anthropic, from the prefix).
    _installed("kimi-code", "anthropic"),
    _installed("copilot-cli", "responses", pin_dialect=True, pinned_env=_COPILOT_OFFLINE),
    _installed("copilot-cli", "anthropic", pin_dialect=True, pinned_env=_COPILOT_OFFLINE),
    # LiteLLM in the sandbox, behind Fabric: `openai/responses/` sends a chat call to the
    # Responses API (Fabric takes no API format of its own).
    _fabric("responses", model_prefix="openai/responses/"),
    # LangChain's clients in the sample graph: the pinned Responses format makes Harbor
    # set use_responses_api; the anthropic prefix picks ChatAnthropic.
    _installed("langgraph", "responses", pin_dialect=True, pinned_env=_LANGGRAPH_UNFORWARDED),
    _installed("langgraph", "anthropic", pinned_env=_LANGGRAPH_UNFORWARDED),
    _fabric("anthropic"),
    _fabric("google", url_path=_GOOGLE_VERSIONED),
    # LiteLLM's providers, as for mini-swe-agent; its model settings file carries the
    # api_base to every model, the weak one too.
    _installed("aider", "anthropic", pinned_env=_aider_weak("anthropic/")),
    _installed("aider", "google", url_path=_GOOGLE_VERSIONED, pinned_env=_aider_weak("gemini/")),
    # The Strands runner picks its model class by the pinned format or the provider
    # (OpenAIResponsesModel, AnthropicModel, GeminiModel on google-genai, which adds the
    # API version itself) and hands it the base URL in client_args.
    _installed("strands", "responses", pin_dialect=True, wired_kwargs=_STRANDS_SAMPLE),
    _installed("strands", "anthropic", wired_kwargs=_STRANDS_SAMPLE),
    _installed("strands", "google", wired_kwargs=_STRANDS_SAMPLE),
    # cline's openai-native provider speaks Responses; Harbor's adapter takes a provider
    # LiteLLM does not know in the colon form, its key then under API_KEY.
    _installed(
        "cline-cli",
        "responses",
        model_prefix="openai-native:",
        key_env="API_KEY",
        url_kwarg=_CLINE_URL,
    ),
)

# (agent, profile) -> its wiring: every wired agent's default profile, and the others.
WIRINGS: Mapping[tuple[str, str], AgentKind] = MappingProxyType(
    {
        (kind.name, kind.profile): kind
        for kind in (*_TABLE, *_OTHER_PROFILES)
        if kind.profile is not None
    }
)
