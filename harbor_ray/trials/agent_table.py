"""The harness wiring table: every Harbor agent, where it runs, the dialect it speaks,
and how it is pointed at the capture proxy, for its default profile (`AGENTS`) and the
others it is wired to speak (`WIRINGS`). Data only: trials/agents.py reads it; what an
entry is, and the builders it is written with: trials/agent_kind.py.

Why each agent is wired as it is: docs/agents.md, "Wiring an agent to the proxy".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harbor_ray.capture.core.dialects.base import DialectName
from harbor_ray.trials.agent_kind import AgentKind, installed, unwired

__all__ = ["AGENTS", "AUX_MODEL", "DEFAULT_CONTEXT_WINDOW", "WIRINGS"]

# The model name of every agent's small/fast/title slot: not the served model's name, so
# that the proxy tells the calls made through those slots from the agent's main loop.
AUX_MODEL = "harbor-aux"

# SmolLM2-135M-Instruct, the default served model, has an 8192-token context.
DEFAULT_CONTEXT_WINDOW = 8192

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
    return installed(
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
    installed(
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
    installed(
        "codex",
        "responses",
        pinned_env={
            "CODEX_AUTH_JSON_PATH": "",
            "CODEX_FORCE_AUTH_JSON": "0",
        },
        note="Harbor writes the URL into config.toml (openai_base_url)",
    ),
    installed(
        "gemini-cli",
        "google",
        pinned_env={
            "GEMINI_OAUTH_CREDS_PATH": "",
            "GEMINI_FORCE_OAUTH": "0",
            "GOOGLE_GENAI_USE_VERTEXAI": "0",
        },
    ),
    installed(
        "antigravity-cli",
        "google",
        pinned_env={"HARBOR_ALLOW_INSECURE_MODEL_BASE_URL": "true"},
        note="Harbor refuses a plain-http URL unless allowed explicitly",
    ),
    # Its Go harness (in the google-antigravity wheel) speaks Gemini's API only.
    installed(
        "antigravity-sdk",
        "google",
        pinned_env={"HARBOR_ALLOW_INSECURE_MODEL_BASE_URL": "true"},
        note="GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY; Harbor refuses a plain-http "
        "URL unless allowed explicitly",
    ),
    # Its provider is not called `openai`: opencode sends that one's calls to the
    # Responses API whatever the npm package; `small_model` is its title generator's.
    installed(
        "opencode",
        "chat",
        pin_dialect=True,
        model_prefix=f"{_OPENCODE_PROVIDER}/",
        wired_kwargs=_OPENCODE_AUX,
        note=f"provider {_OPENCODE_PROVIDER!r} (@ai-sdk/openai-compatible) in "
        "opencode.json, key {env:OPENAI_API_KEY}",
    ),
    installed(
        "mimo",
        "chat",
        pin_dialect=True,
        note="provider baseURL and {env:OPENAI_API_KEY} in mimocode.json",
    ),
    installed(
        "kimi-cli", "chat", note="config file written in the sandbox from RUNTIME_KIMI_API_KEY"
    ),
    installed("kimi-code", "chat", note="KIMI_MODEL_BASE_URL, KIMI_MODEL_API_KEY"),
    installed("mini-swe-agent", "chat", note="LiteLLM in the sandbox"),
    installed("swe-agent", "chat", note="LiteLLM in the sandbox"),
    # Its weak model writes the commit messages of its auto-commits: a side call.
    installed(
        "aider",
        "chat",
        pinned_env=_aider_weak("openai/"),
        note="LiteLLM in the sandbox; api_base in its model settings file",
    ),
    installed("openhands", "chat", note="LLM_BASE_URL, LLM_API_KEY (LiteLLM)"),
    installed("openhands-sdk", "chat", note="LLM_BASE_URL, LLM_API_KEY (LiteLLM)"),
    installed("qwen-coder", "chat"),
    installed(
        "goose",
        "chat",
        url_path="",
        note="OPENAI_HOST is the server root: goose appends v1/chat/completions",
    ),
    installed("hermes", "chat", pin_dialect=True),
    # Offline: no GitHub sign-in, telemetry or update check (a sandbox has no network);
    # the model calls still go to COPILOT_PROVIDER_BASE_URL.
    installed(
        "copilot-cli", "chat", pinned_env=_COPILOT_OFFLINE, note="COPILOT_PROVIDER_* variables"
    ),
    # Its models.json key names a variable: PreinstalledPi writes it as the pinned pi reads it.
    installed("pi", "chat", pin_dialect=True, note="provider in models.json"),
    # The openai/ prefix picks vibe's generic (OpenAI-compatible) backend, whose key
    # variable is OPENAI_API_KEY; its native mistral backend would go to api.mistral.ai.
    installed("vibe", "chat", note="generic backend: provider in config.toml"),
    installed("mcode", "chat", note="provider added with `mcode provider add`"),
    installed("nemo-agent", "chat", note="key and URL in the NAT workflow config"),
    installed("grok-build", "responses", note="model entry in ~/.grok/config.toml"),
    installed("trae-agent", "responses", note="key and URL in trae_config.yaml"),
    installed(
        "muse-code",
        "responses",
        model_prefix="meta/",
        key_env="META_API_KEY",
        note="Meta provider: META_API_KEY, --base-url",
    ),
    installed(
        "code-puppy", "chat", pin_dialect=True, note="custom_openai endpoint in extra_models.json"
    ),
    # Harbor 0.25 pins no API for its providers: openclaw.json names it. Its memory search
    # keeps to keywords: by default it embeds through /v1/embeddings, which an engine
    # serving a chat model does not offer. The tools denied are those whose state
    # openclaw reports in a transient message at the end of every request, which the
    # next request drops: with them each turn would start a new root.
    installed(
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
    installed("fx", "chat", note="runtime provider in ~/.fx/settings.json (setup)"),
    _fabric("chat"),
    # A user's own LangGraph project (`project_path`, langgraph.json); its graph builds
    # its model from what Harbor resolves (LangChain's init_chat_model, the provider
    # from the model's prefix). harbor-ray qualifies it with samples/langgraph.
    installed(
        "langgraph",
        "chat",
        pinned_env=_LANGGRAPH_UNFORWARDED,
        note="a user's LangGraph project (project_path); model and base URL in its configurable",
    ),
    unwired("acp", "sandbox", "a generic ACP client; the agent it launches decides"),
    # Harbor's adapter refuses a base URL; its variant stores the proxy's for the run's
    # provider with `cline auth -b` before the task (PreinstalledClineCli).
    installed(
        "cline-cli",
        "chat",
        url_kwarg=_CLINE_URL,
        note="`cline auth -b URL` before the run (provider_base_url)",
    ),
    unwired("junie", "sandbox", _NO_BASE_URL),
    unwired("cursor-cli", "sandbox", f"Cursor's own service only; {_NO_CONNECTION}"),
    unwired("cortex-code", "sandbox", f"Snowflake Cortex only; {_NO_CONNECTION}"),
    unwired("devin", "sandbox", f"Devin's own service only; {_NO_CONNECTION}"),
    unwired("rovodev-cli", "sandbox", f"Atlassian's service only; {_NO_CONNECTION}"),
    unwired("eve", "sandbox", _NO_CONNECTION),
    unwired("fx-dev", "sandbox", "fx built from source; its setup is not verified"),
    unwired(
        "deerflow",
        "sandbox",
        "forwards the host's provider and web-search API keys into the sandbox",
    ),
    # Harbor runs a user's Strands agent factory: harbor_ray's sample one unless the
    # rollout's kwargs name another (factory_path, factory).
    installed(
        "strands",
        "chat",
        wired_kwargs=_STRANDS_SAMPLE,
        note="OpenAIModel client_args base_url; harbor_ray's sample factory",
    ),
    unwired("computer-1", "host", "a computer-use agent: needs a desktop and a vision model"),
    unwired(
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
    installed(
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
    installed(
        "opencode",
        "google",
        model_prefix="google/",
        url_path=_GOOGLE_VERSIONED,
        key_env="OPENAI_API_KEY",
    ),
    # Its built-in `openai` provider speaks Responses; Harbor will not pin that format
    # for opencode, nor does it need to.
    installed("opencode", "responses"),
    installed("pi", "responses", pin_dialect=True),
    installed("pi", "anthropic", pin_dialect=True),
    # Harbor 0.25 refuses to pin Google's format for pi, yet writes the API pi is given
    # (`model_api`) into its models.json as it is.
    installed(
        "pi",
        "google",
        model_prefix="openai/",
        key_env="OPENAI_API_KEY",
        url_path=_GOOGLE_VERSIONED,
        wired_kwargs={"model_api": "google-generative-ai"},
    ),
    installed("mini-swe-agent", "responses", pin_dialect=True),
    installed("mini-swe-agent", "anthropic"),
    installed("mini-swe-agent", "google", url_path=_GOOGLE_VERSIONED),
    # LiteLLM in the sandbox, as mini-swe-agent: the model's prefix picks the provider;
    # the pinned Responses format sets the SDK's api_mode.
    installed("openhands-sdk", "responses", pin_dialect=True),
    installed("openhands-sdk", "anthropic"),
    installed("openhands-sdk", "google", url_path=_GOOGLE_VERSIONED),
    installed("code-puppy", "responses", pin_dialect=True),
    installed("code-puppy", "anthropic", pin_dialect=True),
    # Its native anthropic client (KIMI_MODEL_PROVIDER_TYPE=anthropic, from the prefix).
    installed("kimi-code", "anthropic"),
    installed("copilot-cli", "responses", pin_dialect=True, pinned_env=_COPILOT_OFFLINE),
    installed("copilot-cli", "anthropic", pin_dialect=True, pinned_env=_COPILOT_OFFLINE),
    # LiteLLM in the sandbox, behind Fabric: `openai/responses/` sends a chat call to the
    # Responses API (Fabric takes no API format of its own).
    _fabric("responses", model_prefix="openai/responses/"),
    # LangChain's clients in the sample graph: the pinned Responses format makes Harbor
    # set use_responses_api; the anthropic prefix picks ChatAnthropic.
    installed("langgraph", "responses", pin_dialect=True, pinned_env=_LANGGRAPH_UNFORWARDED),
    installed("langgraph", "anthropic", pinned_env=_LANGGRAPH_UNFORWARDED),
    _fabric("anthropic"),
    _fabric("google", url_path=_GOOGLE_VERSIONED),
    # LiteLLM's providers, as for mini-swe-agent; its model settings file carries the
    # api_base to every model, the weak one too.
    installed("aider", "anthropic", pinned_env=_aider_weak("anthropic/")),
    installed("aider", "google", url_path=_GOOGLE_VERSIONED, pinned_env=_aider_weak("gemini/")),
    # The Strands runner picks its model class by the pinned format or the provider
    # (OpenAIResponsesModel, AnthropicModel, GeminiModel on google-genai, which adds the
    # API version itself) and hands it the base URL in client_args.
    installed("strands", "responses", pin_dialect=True, wired_kwargs=_STRANDS_SAMPLE),
    installed("strands", "anthropic", wired_kwargs=_STRANDS_SAMPLE),
    installed("strands", "google", wired_kwargs=_STRANDS_SAMPLE),
    # cline's openai-native provider speaks Responses; Harbor's adapter takes a provider
    # LiteLLM does not know in the colon form, its key then under API_KEY.
    installed(
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
