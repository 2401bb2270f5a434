"""Per-agent proxy wiring, checked against the real Harbor 0.25 agent classes.

The configs are built by `agent_config()`; what they do is checked through Harbor's own
code path (`AgentFactory.create_agent_from_config`, as `Trial._init_agent` does) with a
hostile host environment: every provider variable set to a host secret or a foreign URL.
Installed agents run their real `setup()` and `run()` against a recording environment, so
the assertions are on what Harbor would send into the sandbox. terminus-2 makes a real
LiteLLM call to a real capture proxy, which accepts only the session key.
"""

from __future__ import annotations

import base64
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import pytest
from harbor.agents.factory import AgentFactory
from harbor.agents.installed.base import BaseInstalledAgent
from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.agent.context import AgentContext
from harbor.models.agent.name import AgentName
from harbor.models.model_api_format import ModelApiFormat
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig
from harbor.models.trial.config import AgentConfig
from harbor.models.trial.paths import TrialPaths

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.errors import AgentNotWiredError, ProfileNotSupportedError, UnknownAgentError
from harbor_ray.qualify.run import QUALIFY_KWARGS
from harbor_ray.trials.agents import (
    AGENTS,
    AUX_MODEL,
    DEFAULT_CONTEXT_WINDOW,
    ProxyEndpoint,
    agent_config,
    check_profile,
    describe_agents,
    needs_model,
    profiles,
    runs_in_sandbox,
)
from harbor_ray.trials.installs import PREINSTALLED
from tests.capture.live_server import CaptureServer, capture_server

__all__ = ["capture_server"]

PROXY = ProxyEndpoint(host_url="http://127.0.0.1:8765", sandbox_url="http://10.200.0.1:8765")
KEY = "hr-session-key-aaaaaaaaaaaaaaaa"
OTHER_KEY = "hr-session-key-bbbbbbbbbbbbbbbb"
SERVED = "SmolLM2-135M-Instruct"
HOST_SECRET = "HOST-SECRET"
HOST_URL = "http://host-env.invalid"

FORMATS = {
    "chat": ModelApiFormat.OPENAI_CHAT_COMPLETIONS,
    "responses": ModelApiFormat.OPENAI_RESPONSES,
    "anthropic": ModelApiFormat.ANTHROPIC_MESSAGES,
    "google": ModelApiFormat.GOOGLE_GENERATE_CONTENT,
}
WIRED = sorted(name for name, kind in AGENTS.items() if kind.wired and kind.needs_model)
INSTALLED = sorted(name for name in WIRED if AGENTS[name].runs == "sandbox")
UNWIRED = sorted(name for name, kind in AGENTS.items() if not kind.wired)
# Wired through Harbor's connection layer (AgentConfig.base_url); the others (fabric)
# through options of their own (AgentKind.url_kwarg).
BY_CONNECTION = [name for name in WIRED if not AGENTS[name].url_kwarg]
# Every (agent, profile) besides the agents' default ones.
OTHER_PROFILES = [(name, profile) for name in WIRED for profile in profiles(name)[1:]]

# Variables Harbor's adapters read from the host when the config does not say otherwise.
_HOST_KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "CODEX_API_KEY",
    "LLM_API_KEY",
    "MSWEA_API_KEY",
    "KIMI_API_KEY",
    "MOONSHOT_API_KEY",
    "META_API_KEY",
    "XAI_API_KEY",
    "COPILOT_PROVIDER_API_KEY",
    "KIMI_MODEL_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
)
_HOST_URLS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_BASE",
    "GOOGLE_GEMINI_BASE_URL",
    "GEMINI_API_BASE",
    "LLM_BASE_URL",
    "OPENAI_HOST",
    "KIMI_BASE_URL",
    "KIMI_MODEL_BASE_URL",
    "COPILOT_PROVIDER_BASE_URL",
    "MUSE_CODE_BASE_URL",
)
# Host switches that would move an agent off its API key (OAuth, auth.json, clouds).
_HOST_MODES = {
    "CLAUDE_FORCE_OAUTH": "1",
    "CLAUDE_CODE_USE_BEDROCK": "1",
    "CODEX_FORCE_AUTH_JSON": "1",
    "GEMINI_FORCE_OAUTH": "1",
    "GOOGLE_GENAI_USE_VERTEXAI": "true",
}


@pytest.fixture
def hostile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _HOST_KEYS:
        monkeypatch.setenv(name, f"{HOST_SECRET}-{name}")
    for name in _HOST_URLS:
        monkeypatch.setenv(name, HOST_URL)
    for name, value in _HOST_MODES.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_HOST_KEYS, *_HOST_URLS, *_HOST_MODES):
        monkeypatch.delenv(name, raising=False)


def build(agent: str, key: str = KEY, **kwargs) -> AgentConfig:
    # langgraph runs a user's project, which Harbor reads when the agent is made: the one
    # harbor-ray qualifies it with.
    if agent in QUALIFY_KWARGS and "extra_kwargs" not in kwargs:
        kwargs["extra_kwargs"] = dict(QUALIFY_KWARGS[agent])
    return agent_config(agent, proxy=PROXY, session_key=key, served_model=SERVED, **kwargs)


def expected_url(agent: str) -> str:
    kind = AGENTS[agent]
    return PROXY.url(kind.runs) + kind.url_path


def create(config: AgentConfig, logs_dir: Path):
    """The agent exactly as Trial._init_agent builds it; an agent whose proxy URL is an
    agent kwarg that only its harbor_ray variant takes (cline-cli; fabric's adapter takes
    its own) as that variant, as a rollout names it."""
    if config.name in AGENTS and AGENTS[config.name].url_kwarg and config.name in PREINSTALLED:
        config = config.model_copy(update={"name": None, "import_path": PREINSTALLED[config.name]})
    return AgentFactory.create_agent_from_config(config, logs_dir=logs_dir)


def proxy_url(agent: str, config: AgentConfig) -> str | None:
    """The proxy URL the config gives the agent: its base URL, or the kwarg its variant
    takes one in."""
    kind = AGENTS[agent]
    return config.kwargs.get(kind.url_kwarg) if kind.url_kwarg else config.base_url


# -- the registry -----------------------------------------------------------------------


def test_registry_covers_exactly_harbors_agents():
    assert set(AGENTS) == {name.value for name in AgentFactory._AGENT_MAP}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_runs_where_harbor_runs_it(agent: str):
    agent_class = AgentFactory.get_agent_class(AgentName(agent))
    installed = issubclass(agent_class, BaseInstalledAgent)
    assert AGENTS[agent].runs == ("sandbox" if installed else "host")


@pytest.mark.parametrize("agent", BY_CONNECTION)
def test_wiring_follows_harbors_own_endpoint_conventions(agent: str, tmp_path: Path):
    """The protocol Harbor resolves (when it names one) is the table's dialect, and the
    path appended to the proxy URL is the path of Harbor's own default endpoint for this
    agent, provider and protocol (/v1 for OpenAI clients, none for goose's OPENAI_HOST)."""
    kind = AGENTS[agent]
    agent_class = AgentFactory.get_agent_class(AgentName(agent))
    spec = agent_class.MODEL_CONNECTION
    assert spec is not None and agent_class.capabilities.base_url
    connection = create(build(agent), tmp_path).model_connection
    assert connection.model_api_format in (None, FORMATS[kind.dialect])
    # opencode's provider is harbor_ray's own `harbor` (an OpenAI-compatible chat
    # provider), which Harbor does not know (None): the convention is openai's.
    provider = "openai" if agent == "opencode" else connection.provider
    default = spec.default_base_url(provider, connection.model_api_format)
    assert default is not None
    assert urlsplit(default).path.rstrip("/") == kind.url_path


def test_cline_gets_the_proxy_url_through_cline_auth_before_its_run(tmp_path: Path):
    """Harbor's cline-cli adapter refuses a base URL; its variant stores the proxy's for
    the run's provider with `cline auth -b` (openai-compatible's default base ends in
    /v1, as the proxy's OpenAI routes do), then runs cline as Harbor does."""
    assert not AgentFactory.get_agent_class(AgentName("cline-cli")).capabilities.base_url
    for profile, provider in (("openai-chat", "openai"), ("openai-responses", "openai-native")):
        config = build("cline-cli", profile=profile)
        assert config.base_url is None
        agent = create(config, tmp_path)
        _setup, auth, run = agent.create_run_agent_commands("solve the task")
        assert auth.command == (
            f'cline auth -p "$PROVIDER" -k "$API_KEY" -m "$MODELID" -b {PROXY.sandbox_url}/v1'
        )
        assert auth.env == run.env and run.env["PROVIDER"] == provider
        assert run.env["API_KEY"] == KEY and run.env["MODELID"] == SERVED
        assert f"cline -P {provider} " in run.command


def test_unwired_agents_say_why():
    rows = {row["agent"]: row for row in describe_agents()}
    assert set(rows) == set(AGENTS)
    assert UNWIRED, "every Harbor agent wired? then this test is stale"
    for name in UNWIRED:
        assert rows[name]["wired"] is False and rows[name]["note"]
    assert rows["terminus-2"] | {"note": ""} == {
        "agent": "terminus-2",
        "runs": "host",
        "needs_model": True,
        "dialect": "chat",
        "profiles": ["openai-chat", "anthropic", "google", "openai-responses"],
        "wired": True,
        "endpoint": "host_url/v1",
        "key_variable": None,
        "note": "",
    }
    assert rows["claude-code"]["endpoint"] == "sandbox_url"
    assert rows["codex"]["key_variable"] == "OPENAI_API_KEY"
    json.dumps(rows)  # `harbor-ray info` prints it


@pytest.mark.parametrize("agent", UNWIRED)
def test_unwired_agent_is_refused_not_passed_through(agent: str):
    with pytest.raises(AgentNotWiredError, match=agent):
        build(agent)


def test_profiles_name_the_default_first_and_refuse_the_others():
    assert profiles("codex") == ("openai-responses",)
    assert profiles("opencode") == ("openai-chat", "anthropic", "google", "openai-responses")
    assert profiles("oracle") == () and profiles("junie") == ()
    assert profiles("cline-cli") == ("openai-chat", "openai-responses")
    assert profiles("aider") == ("openai-chat", "anthropic", "google")
    assert profiles("strands") == ("openai-chat", "anthropic", "google", "openai-responses")
    assert build("codex", profile="openai-responses") == build("codex")
    check_profile("pi", "google")
    with pytest.raises(
        ProfileNotSupportedError,
        match=r"'codex' is not wired to speak profile 'anthropic'; its "
        r"profiles: openai-responses$",
    ):
        build("codex", profile="anthropic")
    with pytest.raises(ProfileNotSupportedError, match="its profiles: none"):
        check_profile("oracle", "anthropic")


@pytest.mark.parametrize(
    ("profile", "model_name", "url"),
    [
        ("openai-responses", f"openai/responses/{SERVED}", f"{PROXY.host_url}/v1"),
        ("anthropic", f"anthropic/{SERVED}", PROXY.host_url),
        ("google", f"gemini/{SERVED}", f"{PROXY.host_url}/v1beta"),
    ],
)
def test_terminus_profiles_pick_litellms_provider_by_prefix(
    profile: str, model_name: str, url: str
):
    config = build("terminus-2", profile=profile)
    assert (config.model_name, config.base_url) == (model_name, url)
    assert config.kwargs["llm_kwargs"] == {"api_key": KEY}


@pytest.mark.parametrize(
    ("agent", "profile"),
    [cell for cell in OTHER_PROFILES if cell[0] in INSTALLED and cell[0] in BY_CONNECTION],
)
async def test_other_profiles_send_the_sandbox_url_and_key_into_the_sandbox(
    agent: str, profile: str, hostile_env: None, tmp_path: Path
):
    config = build(agent, profile=profile)
    url = proxy_url(agent, config)
    assert url is not None and url.startswith(PROXY.sandbox_url)
    everything = (await run_installed(config, tmp_path)).text()
    assert KEY in everything and url in everything
    assert PROXY.host_url not in everything
    assert HOST_SECRET not in everything and HOST_URL not in everything


def test_needs_model_and_where_it_runs():
    assert needs_model("terminus-2") and needs_model("claude-code")
    assert not needs_model("oracle") and not needs_model("nop")
    assert needs_model("my_pkg.agents:MyAgent")
    assert runs_in_sandbox("codex") and runs_in_sandbox("acp:some-agent")
    assert not runs_in_sandbox("terminus-2") and not runs_in_sandbox("my_pkg.agents:MyAgent")


def test_unknown_agent_lists_the_known_ones():
    with pytest.raises(UnknownAgentError, match="terminus-2") as caught:
        needs_model("terminus-3")
    assert "claude-code" in str(caught.value)
    with pytest.raises(UnknownAgentError):
        build("not an agent")
    with pytest.raises(UnknownAgentError):
        runs_in_sandbox("claude")


def test_no_model_agents_carry_no_key():
    for agent in ("oracle", "nop"):
        config = build(agent)
        assert config.name == agent and config.model_name is None
        assert KEY not in config.model_dump_json(context={"redact_sensitive_env": False})


def test_proxy_endpoint_is_validated_and_normalised():
    assert ProxyEndpoint("http://a:1/", "https://b:2").host_url == "http://a:1"
    for bad in ("a:1", "ftp://a", "http://a?key=x"):
        with pytest.raises(ValueError):
            ProxyEndpoint(bad, "http://b:2")


# -- the configs ------------------------------------------------------------------------


@pytest.mark.parametrize("agent", WIRED)
def test_config_carries_this_rollouts_url_and_key_only(agent: str):
    config = build(agent)
    dumped = config.model_dump_json(context={"redact_sensitive_env": False})
    url = expected_url(agent)
    assert url in dumped
    other_side = PROXY.sandbox_url if AGENTS[agent].runs == "host" else PROXY.host_url
    assert other_side not in dumped
    assert dumped.count(KEY) == 1
    assert OTHER_KEY not in dumped
    kind = AGENTS[agent]
    if kind.url_kwarg:
        assert config.base_url is None and config.kwargs[kind.url_kwarg] == url
        assert config.env[kind.key_env] == KEY
    elif kind.runs == "sandbox":
        assert config.base_url == url and config.env[kind.key_env] == KEY
    else:
        assert config.base_url == url and not config.env


@pytest.mark.parametrize("agent", [*WIRED, "oracle"])
def test_config_survives_a_round_trip(agent: str):
    config = build(agent, sampling=Sampling(temperature=0.5), extra_kwargs={"x": [1]})
    dumped = config.model_dump(context={"redact_sensitive_env": False})
    assert AgentConfig.model_validate(dumped) == config
    assert AgentConfig.model_validate_json(json.dumps(dumped)) == config


def test_plain_model_dump_redacts_the_key_in_env():
    """Harbor redacts secret-named env values on dump (that is what config.json holds).
    A process boundary must pickle the config or dump it with redact_sensitive_env=False."""
    config = build("claude-code")
    assert KEY not in json.dumps(config.model_dump())
    assert AgentConfig.model_validate(config.model_dump()) != config


def test_extra_kwargs_add_options_but_never_the_connection():
    config = build(
        "terminus-2",
        extra_kwargs={
            "max_turns": 7,
            "enable_summarize": True,
            "llm_kwargs": {"timeout": 30},
        },
    )
    assert config.kwargs["max_turns"] == 7 and config.kwargs["enable_summarize"] is True
    assert config.kwargs["llm_kwargs"] == {"api_key": KEY, "timeout": 30}
    for hijack in (
        {"api_base": HOST_URL},
        {"llm_kwargs": {"api_key": OTHER_KEY}},
        {"base_url": HOST_URL},
        {"model_api_key_name": "X"},
    ):
        for agent in ("terminus-2", "codex"):
            with pytest.raises(ValueError, match="may not set"):
                build(agent, extra_kwargs=hijack)


def test_terminus_defaults_follow_sampling():
    kwargs = build("terminus-2", sampling=Sampling(temperature=0.3, max_tokens=512)).kwargs
    assert kwargs["temperature"] == 0.3
    assert kwargs["model_info"]["max_input_tokens"] == DEFAULT_CONTEXT_WINDOW
    assert kwargs["model_info"]["max_output_tokens"] == 512
    assert kwargs["record_terminal_session"] is False
    assert kwargs["collect_rollout_details"] is True
    assert kwargs["enable_summarize"] is False
    assert "temperature" not in build("terminus-2").kwargs
    assert build("terminus-2", context_window=4096).kwargs["model_info"]["max_input_tokens"] == 4096


def test_import_path_agent_gets_openai_compatible_env():
    config = build("my_pkg.agents:MyAgent")
    assert config.import_path == "my_pkg.agents:MyAgent" and config.name is None
    assert config.model_name == f"openai/{SERVED}"
    assert config.env == {
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": PROXY.host_url + "/v1",
        "OPENAI_API_BASE": PROXY.host_url + "/v1",
    }


def test_configs_built_concurrently_share_no_mutable_state():
    shared_extra = {"llm_kwargs": {"timeout": 30}, "tags": ["a"]}
    keys = [f"hr-session-key-{i:04d}-xxxxxxxx" for i in range(64)]
    agents = ["terminus-2", "claude-code", "codex", "opencode"]

    def one(index: int) -> tuple[str, str, AgentConfig]:
        agent, key = agents[index % len(agents)], keys[index]
        return agent, key, build(agent, key=key, extra_kwargs=shared_extra)

    with ThreadPoolExecutor(16) as pool:
        built = list(pool.map(one, range(len(keys))))
    for agent, key, config in built:
        dumped = config.model_dump_json(context={"redact_sensitive_env": False})
        assert [k for k in keys if k in dumped] == [key], agent
    # Mutating one rollout's config reaches neither its siblings nor the caller's dict.
    first, second = built[0][2], built[4][2]
    first.kwargs["llm_kwargs"]["timeout"] = 1
    first.kwargs["tags"].append("b")
    assert second.kwargs["llm_kwargs"] == {"api_key": built[4][1], "timeout": 30}
    assert second.kwargs["tags"] == ["a"]
    assert shared_extra == {"llm_kwargs": {"timeout": 30}, "tags": ["a"]}
    assert first.env is not built[1][2].env


# -- terminus-2, through Harbor and LiteLLM, against a real capture proxy ----------------


@pytest.mark.parametrize("env", ["hostile_env", "clean_env"])
def test_terminus_resolves_the_proxy_and_key_not_the_host_env(
    env: str, request: pytest.FixtureRequest, tmp_path: Path
):
    request.getfixturevalue(env)
    agent = create(build("terminus-2", sampling=Sampling(temperature=0.2)), tmp_path)
    llm = agent._llm
    assert llm._model_name == f"openai/{SERVED}"
    assert llm._api_base == PROXY.host_url + "/v1"
    assert llm._llm_kwargs["api_key"] == KEY
    assert llm._temperature == 0.2 and llm._collect_rollout_details
    assert llm.get_model_context_limit() == DEFAULT_CONTEXT_WINDOW
    # Nothing for the sandbox: Harbor would put extra_env in every command and in tmux.
    assert agent.extra_env == {}
    assert agent.options.enable_summarize is False
    assert agent.options.record_terminal_session is False


async def test_terminus_llm_call_reaches_the_proxy_with_the_session_key(
    capture_server: CaptureServer, hostile_env: None, tmp_path: Path
):
    session_id, key = capture_server.new_session()
    proxy = ProxyEndpoint(host_url=capture_server.url, sandbox_url="http://10.200.0.1:1")
    config = agent_config("terminus-2", proxy=proxy, session_key=key, served_model=SERVED)
    agent = create(config, tmp_path)
    reply = await agent._llm.call(prompt="hello proxy")
    assert reply.content == "echo: hello proxy"
    (turn,) = capture_server.export(session_id)["turns"]
    assert turn["dialect"] == "chat" and turn["request_model"] == SERVED
    assert turn["request_messages"] == [{"role": "user", "content": "hello proxy"}]


# -- installed agents, through Harbor's setup() and run() -------------------------------


@dataclass
class Recorded:
    """What an agent sent into the sandbox: every command with its effective env."""

    execs: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    uploads: dict[str, str] = field(default_factory=dict)

    def env_values(self, name: str) -> set[str]:
        return {env[name] for _, env in self.execs if name in env}

    def text(self) -> str:
        """Everything the sandbox sees, with base64 blobs (code-puppy's config) decoded."""
        parts = [command for command, _ in self.execs]
        parts += [value for _, env in self.execs for value in env.values()]
        parts += self.uploads.values()
        blobs = (m for part in parts for m in re.findall(r"\b[A-Za-z0-9+/]{40,}={0,2}", part))
        return "\n".join([*parts, *(_decoded(blob) for blob in blobs)])


def _decoded(blob: str) -> str:
    try:
        return base64.b64decode(blob, validate=True).decode()
    except ValueError:  # a long word that is not base64 text
        return ""


class RecordingEnvironment(BaseEnvironment):
    """A Harbor environment that runs nothing: every command succeeds and is recorded
    with the env Harbor's own merge gives it (persistent < per-exec < the trial's scope)."""

    # codex and deerflow ask the sandbox for the agent's uid/gid (and workdir).
    _REPLIES: ClassVar[dict[str, str]] = {
        "CODEX_RUNTIME_ID": "\nCODEX_RUNTIME_ID 0 0\n",
        "pwd -P && id -u && id -g": "/app\n0\n0\n",
    }

    def __init__(self, tmp_path: Path, recorded: Recorded):
        super().__init__(
            environment_dir=tmp_path / "environment",
            environment_name="task",
            session_id="task__env",
            trial_paths=TrialPaths(tmp_path / "trial"),
            task_env_config=TaskEnvironmentConfig(),
        )
        self.recorded = recorded

    @staticmethod
    def type() -> str:
        return "recording"

    def _validate_definition(self) -> None:
        pass

    async def start(self, force_build: bool) -> None:
        pass

    async def stop(self, delete: bool) -> None:
        pass

    async def upload_file(self, source_path, target_path) -> None:
        self.recorded.uploads[str(target_path)] = Path(source_path).read_text(errors="replace")

    async def upload_dir(self, source_dir, target_dir) -> None:
        for path in Path(source_dir).rglob("*"):
            if path.is_file():
                self.recorded.uploads[f"{target_dir}/{path.relative_to(source_dir)}"] = (
                    path.read_text(errors="replace")
                )

    async def download_file(self, source_path, target_path) -> None:
        pass

    async def download_dir(self, source_dir, target_dir) -> None:
        pass

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        self.recorded.execs.append((command, dict(self._merge_env(env) or {})))
        reply = next((out for marker, out in self._REPLIES.items() if marker in command), "")
        return ExecResult(stdout=reply, stderr="", return_code=0)


async def run_installed(config: AgentConfig, tmp_path: Path) -> Recorded:
    """setup() then run(), scoped the way Trial scopes them (`agent.extra_env`)."""
    agent = create(config, tmp_path / "logs")
    recorded = Recorded()
    environment = RecordingEnvironment(tmp_path, recorded)
    with environment.scoped_exec_env(agent.extra_env):
        await agent.setup(environment)
        await agent.run("solve the task", environment, AgentContext())
    return recorded


@pytest.mark.parametrize("agent", [name for name in INSTALLED if name in BY_CONNECTION])
async def test_installed_agent_sends_the_sandbox_url_and_key_into_the_sandbox(
    agent: str, hostile_env: None, tmp_path: Path
):
    recorded = await run_installed(build(agent), tmp_path)
    # With what the adapter writes into its logs directory for the sandbox to copy from
    # /logs/agent (openclaw's openclaw.json).
    everything = recorded.text() + "".join(
        path.read_text() for path in (tmp_path / "logs").glob("*.json")
    )
    assert KEY in everything
    assert expected_url(agent) in everything
    assert PROXY.host_url not in everything
    assert HOST_SECRET not in everything and HOST_URL not in everything


async def test_claude_code_env(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("claude-code"), tmp_path)
    env = next(e for c, e in recorded.execs if "claude --verbose" in c)
    assert env["ANTHROPIC_BASE_URL"] == PROXY.sandbox_url
    assert env["ANTHROPIC_API_KEY"] == KEY
    assert not env.get("ANTHROPIC_AUTH_TOKEN") and not env.get("CLAUDE_CODE_OAUTH_TOKEN")
    assert env["ANTHROPIC_MODEL"] == SERVED
    assert env["CLAUDE_CODE_USE_BEDROCK"] == "0"


async def test_codex_config_and_env(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("codex"), tmp_path)
    config = recorded.uploads["/installed-agent/codex-home/config.toml"]
    assert f'openai_base_url = "{PROXY.sandbox_url}/v1"' in config
    command, env = next((c, e) for c, e in recorded.execs if "codex exec" in c)
    assert env["OPENAI_API_KEY"] == KEY and env["OPENAI_BASE_URL"] == PROXY.sandbox_url + "/v1"
    assert f"--model {SERVED} " in command
    assert "CODEX_API_KEY= codex exec" in command  # a stray fallback key is cleared


async def test_gemini_cli_env(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("gemini-cli"), tmp_path)
    command, env = next((c, e) for c, e in recorded.execs if "gemini --yolo" in c)
    assert env["GOOGLE_GEMINI_BASE_URL"] == PROXY.sandbox_url
    assert env["GEMINI_API_KEY"] == KEY
    assert f"--model={SERVED} " in command


async def test_opencode_provider_config(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("opencode"), tmp_path)
    write = next(c for c, _ in recorded.execs if "opencode.json" in c)
    config = json.loads(write.split("echo ", 1)[1].split(" > ", 1)[0].strip("'"))
    # Not `openai`: opencode sends that provider's calls to the Responses API.
    assert set(config["provider"]) == {"harbor"}
    assert config["provider"]["harbor"] == {
        "models": {SERVED: {}, AUX_MODEL: {}},
        "options": {"baseURL": PROXY.sandbox_url + "/v1", "apiKey": "{env:OPENAI_API_KEY}"},
        "npm": "@ai-sdk/openai-compatible",  # chat completions, not the Responses API
    }
    assert config["small_model"] == f"harbor/{AUX_MODEL}"  # its title generator's slot
    command, env = next((c, e) for c, e in recorded.execs if "opencode --model" in c)
    assert env["OPENAI_API_KEY"] == KEY and f"--model=harbor/{SERVED} " in command


async def test_claude_code_small_fast_slots_name_the_aux_model(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("claude-code"), tmp_path)
    env = next(e for c, e in recorded.execs if "claude --verbose" in c)
    assert env["ANTHROPIC_MODEL"] == SERVED
    assert env["ANTHROPIC_SMALL_FAST_MODEL"] == AUX_MODEL
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == AUX_MODEL
    assert env["ANTHROPIC_DEFAULT_SONNET_MODEL"] == SERVED


async def test_kimi_cli_config(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("kimi-cli"), tmp_path)
    assert recorded.env_values("RUNTIME_KIMI_API_KEY") == {KEY}
    (config_json,) = recorded.env_values("RUNTIME_KIMI_CONFIG_JSON")
    provider = json.loads(config_json)["providers"]["runtime"]
    assert provider["base_url"] == PROXY.sandbox_url + "/v1"


async def test_mini_swe_agent_litellm_in_the_sandbox(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("mini-swe-agent"), tmp_path)
    command, env = next((c, e) for c, e in recorded.execs if "mini-swe-agent --yolo" in c)
    assert f"--model=openai/{SERVED} " in command
    assert f"model.model_kwargs.api_base={PROXY.sandbox_url}/v1 " in command
    assert env["OPENAI_API_KEY"] == KEY


@pytest.mark.parametrize(
    ("profile", "model", "url"),
    [
        ("openai-chat", f"openai/{SERVED}", f"{PROXY.sandbox_url}/v1"),
        ("openai-responses", f"openai/responses/{SERVED}", f"{PROXY.sandbox_url}/v1"),
        ("anthropic", f"anthropic/{SERVED}", PROXY.sandbox_url),
        ("google", f"gemini/{SERVED}", f"{PROXY.sandbox_url}/v1beta"),
    ],
)
def test_fabric_gets_the_proxy_through_its_own_options(
    profile: str, model: str, url: str, hostile_env: None, tmp_path: Path
):
    # Harbor refuses fabric a base_url: the URL and the key's variable are Fabric options,
    # and its mini-swe-agent adapter reads the key from that variable in the sandbox.
    agent = create(build("fabric", profile=profile), tmp_path)
    (selected,) = agent._build_config().models.values()
    assert (selected.model, selected.base_url) == (model, url)
    assert selected.api_key_env is not None
    assert agent._runner_env[selected.api_key_env] == KEY
    assert agent._runner_python == "/opt/fabric-venv/bin/python"
    assert HOST_SECRET not in json.dumps(agent._runner_env) and HOST_URL not in url


async def test_fabric_sends_the_sandbox_url_and_key_into_the_sandbox(
    hostile_env: None, tmp_path: Path
):
    agent = create(build("fabric"), tmp_path / "logs")
    recorded = Recorded()
    environment = RecordingEnvironment(tmp_path, recorded)
    with environment.scoped_exec_env(agent.extra_env):
        await agent.setup(environment)
        # The recording sandbox runs no runner, so there is no result to read back.
        with pytest.raises(FileNotFoundError, match="fabric-result"):
            await agent.run("solve the task", environment, AgentContext())
    everything = recorded.text()
    assert KEY in everything and expected_url("fabric") in everything
    assert PROXY.host_url not in everything
    assert HOST_SECRET not in everything and HOST_URL not in everything


async def test_goose_host_is_the_server_root(hostile_env: None, tmp_path: Path):
    recorded = await run_installed(build("goose"), tmp_path)
    env = next(e for c, e in recorded.execs if "goose run" in c)
    assert env["OPENAI_HOST"] == PROXY.sandbox_url
    assert env["OPENAI_API_KEY"] == KEY and env["GOOSE_PROVIDER"] == "openai"


def test_two_rollouts_of_one_agent_resolve_their_own_keys(hostile_env: None, tmp_path: Path):
    first = create(build("codex", key=KEY), tmp_path / "a").model_connection
    second = create(build("codex", key=OTHER_KEY), tmp_path / "b").model_connection
    assert (first.api_key, second.api_key) == (KEY, OTHER_KEY)


async def test_recording_environment_records_what_it_is_given(tmp_path: Path):
    """The harness itself: a value in the trial scope reaches every command."""
    recorded = Recorded()
    environment = RecordingEnvironment(tmp_path, recorded)
    with environment.scoped_exec_env({"A": "1"}):
        await environment.exec("true", env={"A": "0", "B": "2"})
    assert recorded.execs == [("true", {"A": "1", "B": "2"})]


def test_terminus2_turn_limit_follows_the_budget() -> None:
    proxy = ProxyEndpoint(host_url="http://127.0.0.1:1", sandbox_url="http://127.0.0.1:2")
    config = agent_config(
        "terminus-2", proxy=proxy, session_key="hr-a-b", served_model="m", budget=5
    )
    assert config.kwargs["max_turns"] == 6
    unlimited = agent_config("terminus-2", proxy=proxy, session_key="hr-a-b", served_model="m")
    assert "max_turns" not in unlimited.kwargs
