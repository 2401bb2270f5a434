"""Which Harbor agents harbor_ray can run, and how each one is pointed at the capture proxy.

`agent_config()` turns (agent name, profile, proxy, key, served model) into the Harbor
`AgentConfig` for one rollout. A profile names the dialect an agent speaks to the proxy
(`PROFILES`): each wired agent has its default one, and some can be wired to speak others
(`profiles()`). It is pure (no network, no `os.environ`, no
process-global state), and the session key travels only inside the returned config.
The wiring itself is data, in trials/agent_table.py; why each agent is wired as it is:
docs/agents.md, "Wiring an agent to the proxy".
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from harbor.models.trial.config import AgentConfig

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.errors import AgentNotWiredError, ProfileNotSupportedError, UnknownAgentError
from harbor_ray.trials.agent_kind import FORMATS, PROFILES, AgentKind, Runs
from harbor_ray.trials.agent_table import AGENTS, AUX_MODEL, DEFAULT_CONTEXT_WINDOW, WIRINGS

__all__ = [
    "AGENTS",
    "AUX_MODEL",
    "DEFAULT_CONTEXT_WINDOW",
    "PROFILES",
    "AgentAllowList",
    "AgentKind",
    "AgentNotWiredError",
    "ProfileNotSupportedError",
    "ProxyEndpoint",
    "UnknownAgentError",
    "agent_config",
    "check_profile",
    "describe_agents",
    "needs_model",
    "profiles",
    "runs_in_sandbox",
]

# Kwargs that carry the connection. `extra_kwargs` may add options, never redirect a
# rollout's model calls or its key.
_CONNECTION_KWARGS = frozenset(
    {
        "api_base",
        "api_key",
        "base_url",
        "model_api_format",
        "model_api_key_name",
        "fabric_model_base_url",
        "fabric_model_api_key_env",
        "provider_base_url",
    }
)
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_ACP_SHORTHAND = "acp:"


@dataclass(frozen=True)
class ProxyEndpoint:
    """Where the capture proxy is, seen from the host and from inside the sandbox.

    They differ when the sandbox has its own network namespace; the forwarding that makes
    `sandbox_url` reachable is the sandbox's business.
    """

    host_url: str
    sandbox_url: str

    def __post_init__(self) -> None:
        for name in ("host_url", "sandbox_url"):
            url = urlsplit(getattr(self, name))
            if url.scheme not in ("http", "https") or not url.netloc or url.query:
                raise AgentNotWiredError(
                    f"{name} must be an http(s) URL without a query, not {getattr(self, name)!r}"
                )
            object.__setattr__(self, name, getattr(self, name).rstrip("/"))

    def url(self, runs: Runs) -> str:
        return self.host_url if runs == "host" else self.sandbox_url


def profiles(agent: str) -> tuple[str, ...]:
    """The profiles `agent` is wired to speak, its default one first (none for an agent
    without a model or a wiring)."""
    default = _kind(agent).profile
    others = sorted(p for (name, p) in WIRINGS if name == agent and p != default)
    return (default, *others) if default else ()


def check_profile(agent: str, profile: str) -> None:
    """Raises `ProfileNotSupportedError` (listing its profiles) unless `agent` is wired to
    speak `profile`."""
    _profiled(agent, profile)


def _profiled(agent: str, profile: str | None) -> AgentKind:
    kind = _kind(agent)
    if profile is None or profile == kind.profile:
        return kind
    if (agent, profile) in WIRINGS:
        return WIRINGS[agent, profile]
    raise ProfileNotSupportedError(
        f"agent {agent!r} is not wired to speak profile {profile!r}; its profiles: "
        f"{', '.join(profiles(agent)) or 'none'}"
    )


def _kind(agent: str) -> AgentKind:
    if agent in AGENTS:
        return AGENTS[agent]
    if agent.startswith(_ACP_SHORTHAND):
        return AGENTS["acp"]
    if _IMPORT_PATH.match(agent):
        return AgentKind(
            agent,
            "host",
            dialect="chat",
            channel="openai_env",
            model_prefix="openai/",
            url_path="/v1",
        )
    known = ", ".join(sorted(AGENTS))
    raise UnknownAgentError(
        f"unknown agent {agent!r}: not a Harbor agent name and not an import path "
        f"(pkg.module:Class). Known agents: {known}"
    )


def needs_model(agent: str) -> bool:
    """Whether the agent calls a model (and so needs a capture session)."""
    return _kind(agent).needs_model


def runs_in_sandbox(agent: str) -> bool:
    """Whether the agent's model client runs inside the sandbox, and so must reach the
    proxy at `ProxyEndpoint.sandbox_url` (the caller arranges the forwarding)."""
    return _kind(agent).runs == "sandbox"


@dataclass(frozen=True)
class AgentAllowList:
    """The agents a service runs for whoever calls it (the online controller's submits,
    the playground's forms): the Harbor agents `harbor-ray info` lists, and the import
    paths its operator names (`import_paths`). Any other name is refused before anything
    is imported: an import path runs the module it names, so a caller's own would run
    any installed code. `named_in` says where an operator names more, for the refusal."""

    import_paths: tuple[str, ...] = ()
    named_in: str = "in the service's allow-list"

    def __post_init__(self) -> None:
        for agent in self.import_paths:
            needs_model(agent)  # UnknownAgentError unless an agent or an import path

    def check(self, agent: str, shown: str | None = None) -> None:
        """Raises `UnknownAgentError` unless `agent` is allowed; `shown`: how the refusal
        quotes it (the name's repr by default)."""
        if agent not in AGENTS and agent not in self.import_paths:
            known = ", ".join([*sorted(AGENTS), *self.import_paths])
            raise UnknownAgentError(
                f"unknown agent {shown or repr(agent)}: not a Harbor agent `harbor-ray "
                f"info` lists, nor an import path {self.named_in} (known: {known})"
            )

    def describe(self) -> list[dict[str, Any]]:
        """`describe_agents`' rows, the allowed import paths' after the Harbor agents'."""
        return describe_agents(self.import_paths)


def describe_agents(import_paths: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One row per Harbor agent, for `harbor-ray info`, then one per import path given."""
    kinds = [
        *sorted(AGENTS.values(), key=lambda k: k.name),
        *(_kind(path) for path in import_paths),
    ]
    return [
        {
            "agent": kind.name,
            "runs": kind.runs,
            "needs_model": kind.needs_model,
            "dialect": kind.dialect,
            "profiles": list(profiles(kind.name)),
            "wired": kind.wired,
            # Which proxy URL it gets, and what is appended: "sandbox_url/v1".
            "endpoint": f"{kind.runs}_url{kind.url_path}" if kind.dialect else None,
            "key_variable": kind.key_env or None,
            "note": kind.note,
        }
        for kind in kinds
    ]


def _merge(wired: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Extra kwargs over the wiring's defaults; nested dicts merge, the connection stays."""
    merged = dict(wired)
    for name, value in extra.items():
        if name in _CONNECTION_KWARGS:
            raise AgentNotWiredError(
                f"extra_kwargs may not set {name!r}: the proxy wiring owns "
                "it; drop it from the agent's kwargs"
            )
        if isinstance(value, Mapping):
            base = merged.get(name)
            merged[name] = _merge(base if isinstance(base, Mapping) else {}, value)
        else:
            merged[name] = value
    return merged


def _terminus_kwargs(
    session_key: str, sampling: Sampling | None, context_window: int, budget: int | None
) -> dict[str, Any]:
    max_tokens = sampling.max_tokens if sampling and sampling.max_tokens else context_window
    kwargs: dict[str, Any] = {
        "llm_kwargs": {"api_key": session_key},
        # asciinema is not in the sandbox, and a recording is not training data.
        "record_terminal_session": False,
        # Asks for token ids and logprobs, so that terminus-2's ATIF can carry them for a
        # cross-check against the capture (when the proxy's reply includes them).
        "collect_rollout_details": True,
        # Summaries are auxiliary model calls that cut the conversation, and Harbor
        # summarises proactively below 8000 free tokens: every turn of an 8k model.
        "enable_summarize": False,
        # LiteLLM knows nothing of the served model; zero costs keep it from guessing.
        "model_info": {
            "max_input_tokens": context_window,
            "max_output_tokens": max_tokens,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
        },
    }
    if budget is not None:
        # Past the budget the proxy answers with a terminal stop that terminus-2 cannot
        # parse as an action, and it would ask again until its own turn limit: make that
        # limit the budget (plus the completion confirmation).
        kwargs["max_turns"] = budget + 1
    if sampling is not None and sampling.temperature is not None:
        # The proxy imposes it anyway; passing it keeps terminus-2's own record true.
        kwargs["temperature"] = sampling.temperature
    return kwargs


def agent_config(
    agent: str,
    *,
    proxy: ProxyEndpoint,
    session_key: str,
    served_model: str,
    sampling: Sampling | None = None,
    extra_kwargs: Mapping[str, Any] | None = None,
    context_window: int = DEFAULT_CONTEXT_WINDOW,
    budget: int | None = None,
    profile: str | None = None,
) -> AgentConfig:
    """The Harbor AgentConfig that sends this agent's model calls to the proxy with this key.

    `agent` is a Harbor agent name or an import path; `profile` the dialect it speaks to
    the proxy (None: its default). `extra_kwargs` become agent kwargs (over harbor_ray's
    defaults) but may not touch the connection. Raises `UnknownAgentError` for a name that
    is neither, `AgentNotWiredError` for an agent harbor_ray cannot point at the proxy
    (`ProfileNotSupportedError` for a profile it is not wired to speak).
    """
    kind = _profiled(agent, profile)
    if not kind.wired:
        raise AgentNotWiredError(f"agent {agent!r} cannot be wired to the proxy: {kind.note}")
    # Deep-copied: a caller's nested dict must not end up shared by several rollouts.
    extra = copy.deepcopy(dict(extra_kwargs or {}))
    if kind.channel == "none":
        return AgentConfig(name=agent, kwargs=_merge({}, extra))
    assert session_key, "session_key is empty: the proxy mints every session key"

    url = proxy.url(kind.runs) + kind.url_path
    model_name = kind.model_prefix + served_model
    if kind.channel == "litellm":
        kwargs = _terminus_kwargs(session_key, sampling, context_window, budget)
        return AgentConfig(
            name=agent, model_name=model_name, base_url=url, kwargs=_merge(kwargs, extra)
        )
    if kind.channel == "openai_env":
        env = {"OPENAI_API_KEY": session_key, "OPENAI_BASE_URL": url, "OPENAI_API_BASE": url}
        return AgentConfig(
            import_path=agent, model_name=model_name, env=env, kwargs=_merge({}, extra)
        )
    aux = dict.fromkeys(kind.aux_env, AUX_MODEL)
    kwargs = copy.deepcopy(_plain(kind.wired_kwargs))
    if kind.url_kwarg:
        kwargs[kind.url_kwarg] = url
    if kind.key_env_kwarg:
        kwargs[kind.key_env_kwarg] = kind.key_env
    return AgentConfig(
        name=agent,
        model_name=model_name,
        base_url=None if kind.url_kwarg else url,
        model_api_format=FORMATS[kind.dialect] if kind.pin_dialect and kind.dialect else None,
        env={**dict(kind.pinned_env), **aux, kind.key_env: session_key},
        kwargs=_merge(kwargs, extra),
    )


def _plain(value: Any) -> Any:
    """A read-only table as the plain dicts Harbor's kwargs take."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
