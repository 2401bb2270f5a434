"""Harbor's installed agents, made to use a CLI that is already in the sandbox.

Harbor 0.25's codex and claude-code adapters check whether their CLI is on PATH and skip
their install when it is. gemini-cli, qwen-code, opencode, pi, mini-swe-agent,
code-puppy, copilot-cli, vibe, openhands, kimi-code, openclaw, aider, cline-cli,
antigravity-sdk and langgraph always install: nvm and Node from GitHub and nodejs.org,
the uv installer from astral.sh (and `uv run --script`, which fetches from PyPI at run
time),
GitHub's copilot install script or aider.chat's, none of which a sandbox without
network reaches. When the local sandbox mounts the agent's cache entry
(installs.py), the rollout names these subclasses instead (`AgentConfig.import_path`,
from `installs.PREINSTALLED`); each keeps everything of its Harbor class (its name,
its wiring, its run) and only skips the install when every command it runs is
present. Where a command is missing, Harbor's own install runs, as it would have.

Imported by Harbor when a trial loads its agent (never by harbor_ray's own modules, which
stay free of agent classes and the LiteLLM import they bring).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, ClassVar

from harbor.agents.installed import antigravity_sdk, langgraph
from harbor.agents.installed import strands as strands_module
from harbor.agents.installed import vibe as vibe_module
from harbor.agents.installed.aider import Aider
from harbor.agents.installed.antigravity_sdk import AntigravitySDK
from harbor.agents.installed.base import BaseInstalledAgent
from harbor.agents.installed.cline.cline import ClineCli, ExecInput
from harbor.agents.installed.code_puppy import CodePuppy
from harbor.agents.installed.copilot_cli import CopilotCli
from harbor.agents.installed.gemini_cli import GeminiCli
from harbor.agents.installed.kimi_code import KimiCode
from harbor.agents.installed.langgraph import LangGraph
from harbor.agents.installed.mini_swe_agent import MiniSweAgent
from harbor.agents.installed.openclaw import OpenClaw
from harbor.agents.installed.opencode import OpenCode
from harbor.agents.installed.openhands import OpenHands
from harbor.agents.installed.pi import Pi
from harbor.agents.installed.qwen_code import QwenCode
from harbor.agents.installed.strands import Strands
from harbor.agents.installed.vibe import Vibe
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

__all__ = [
    "PreinstalledAider",
    "PreinstalledAntigravitySdk",
    "PreinstalledClineCli",
    "PreinstalledCodePuppy",
    "PreinstalledCopilotCli",
    "PreinstalledGeminiCli",
    "PreinstalledKimiCode",
    "PreinstalledLangGraph",
    "PreinstalledMiniSweAgent",
    "PreinstalledOpenClaw",
    "PreinstalledOpenCode",
    "PreinstalledOpenHands",
    "PreinstalledPi",
    "PreinstalledQwenCode",
    "PreinstalledStrands",
    "PreinstalledVibe",
    "presence_command",
    "write_text_command",
]


def presence_command(commands: tuple[str, ...]) -> str:
    """A shell command that succeeds only when every command is on PATH."""
    return " && ".join(f"command -v {shlex.quote(c)} >/dev/null 2>&1" for c in commands)


def write_text_command(text: str, path: str) -> str:
    """A shell command that writes `text` to `path` as it is."""
    return f"printf %s {shlex.quote(text)} > {shlex.quote(path)}"


class _SkipInstallWhenPresent(BaseInstalledAgent):
    COMMANDS: ClassVar[tuple[str, ...]] = ()

    async def install(self, environment: BaseEnvironment) -> None:
        found = await environment.exec(command=presence_command(self.COMMANDS))
        if found.return_code == 0:
            self.logger.debug(f"{self.name()} is already installed: {self.COMMANDS}")
            return
        await super().install(environment)


class PreinstalledGeminiCli(_SkipInstallWhenPresent, GeminiCli):
    """Also takes `core_tools`: the only built-in tools gemini-cli declares (its
    settings' `tools.core`), for models whose context cannot hold all of them."""

    COMMANDS = ("gemini", "node")

    def __init__(self, *args: Any, core_tools: list[str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._core_tools = None if core_tools is None else list(core_tools)

    def _build_settings_config(
        self, model: str | None = None, auth_type: str | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        config, alias = super()._build_settings_config(model, auth_type)
        if self._core_tools is None:
            return config, alias
        config = dict(config or {})
        config["tools"] = {**(config.get("tools") or {}), "core": self._core_tools}
        return config, alias


class PreinstalledQwenCode(_SkipInstallWhenPresent, QwenCode):
    """Also takes `system_prompt`: it replaces qwen-code's own (which QWEN_SYSTEM_MD
    points at a file for), for models whose context cannot hold that one."""

    COMMANDS = ("qwen", "node")
    SYSTEM_MD = "/tmp/harbor-ray-qwen-system.md"

    def __init__(self, *args: Any, system_prompt: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._system_prompt = system_prompt
        if system_prompt is not None:
            self._extra_env["QWEN_SYSTEM_MD"] = self.SYSTEM_MD

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        if self._system_prompt is not None:
            await environment.exec(command=write_text_command(self._system_prompt, self.SYSTEM_MD))
        await super().run(instruction, environment, context)


class PreinstalledOpenCode(_SkipInstallWhenPresent, OpenCode):
    COMMANDS = ("opencode",)


class PreinstalledOpenClaw(_SkipInstallWhenPresent, OpenClaw):
    """Every command Harbor's adapter runs starts `. ~/.nvm/nvm.sh && nvm use 24`. With
    the CLI present, the Node on PATH is the one its cache entry brings, so an nvm.sh
    whose `nvm` does nothing stands in where Harbor's install left none."""

    COMMANDS = ("openclaw", "node")
    NVM_STAND_IN = (
        'mkdir -p ~/.nvm && { [ -e ~/.nvm/nvm.sh ] || printf "nvm() { :; }\\n" > ~/.nvm/nvm.sh; }'
    )

    async def install(self, environment: BaseEnvironment) -> None:
        await super().install(environment)
        await environment.exec(command=self.NVM_STAND_IN)

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        # Harbor writes openclaw.json on the host into the trial's agent log directory and
        # copies it from /logs/agent inside, a mount only some environments make (the
        # local sandbox's logs are downloaded after the run): the same file goes in first.
        config = self.logs_dir / self._UPLOAD_CONFIG_FILENAME
        config.write_text(json.dumps(self._build_full_openclaw_config(), indent=2) + "\n")
        await environment.upload_file(
            config, f"{self._CONTAINER_LOGS_AGENT}/{self._UPLOAD_CONFIG_FILENAME}"
        )
        await super().run(instruction, environment, context)


class PreinstalledPi(_SkipInstallWhenPresent, Pi):
    """Names its key variable the way the pinned release reads it: Harbor writes the
    models.json `apiKey` as `$NAME`, which newer pi resolves, but pi 0.73 (the last on
    Node 20) takes a bare variable name and would send `$NAME` itself as the key."""

    COMMANDS = ("pi", "node")

    def _build_custom_models_json(self, access: Any, model_id: str) -> dict[str, Any] | None:
        models: dict[str, Any] | None = super()._build_custom_models_json(access, model_id)
        for provider in (models or {}).get("providers", {}).values():
            provider["apiKey"] = str(provider["apiKey"]).removeprefix("$")
        return models


class PreinstalledKimiCode(_SkipInstallWhenPresent, KimiCode):
    """Its `node` is the newer one its cache entry brings (agent_pins.AgentPin.node).

    Also takes `agent_file`: the Markdown of a kimi agent definition (frontmatter with
    its `tools`, its body the system prompt), which the run then starts with
    (`--agent-file`), for models whose context cannot hold kimi's own agent."""

    COMMANDS = ("kimi", "node")
    AGENT_FILE = "/tmp/harbor-ray-kimi-agent.md"
    # Harbor's run passes the task this way, once, in the command that runs kimi.
    _PROMPT_FLAG = '--prompt "$'

    def __init__(self, *args: Any, agent_file: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._agent_file = agent_file

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        if self._agent_file is not None:
            await environment.exec(command=write_text_command(self._agent_file, self.AGENT_FILE))
        await super().run(instruction, environment, context)

    async def exec_as_agent(
        self, environment: BaseEnvironment, command: str, *args: Any, **kwargs: Any
    ) -> Any:
        if self._agent_file is not None and self._PROMPT_FLAG in command:
            command = command.replace(
                self._PROMPT_FLAG, f"--agent-file {self.AGENT_FILE} {self._PROMPT_FLAG}", 1
            )
        return await super().exec_as_agent(environment, command, *args, **kwargs)


class PreinstalledMiniSweAgent(_SkipInstallWhenPresent, MiniSweAgent):
    COMMANDS = ("mini-swe-agent",)


class PreinstalledAider(_SkipInstallWhenPresent, Aider):
    COMMANDS = ("aider",)


class PreinstalledCodePuppy(_SkipInstallWhenPresent, CodePuppy):
    COMMANDS = ("code-puppy",)


class PreinstalledCopilotCli(_SkipInstallWhenPresent, CopilotCli):
    """Also takes `available_tools`: the only tools copilot declares to the model
    (`--available-tools`), for models whose context cannot hold all of them."""

    COMMANDS = ("copilot", "node")

    def __init__(self, *args: Any, available_tools: list[str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._available_tools = None if available_tools is None else list(available_tools)

    def build_cli_flags(self) -> str:
        flags: str = super().build_cli_flags()
        if self._available_tools is None:
            return flags
        tools = " ".join(shlex.quote(tool) for tool in self._available_tools)
        return f"{flags} --available-tools {tools}".strip()


class PreinstalledVibe(_SkipInstallWhenPresent, Vibe):
    """Also takes `settings`: top-level keys of vibe's config.toml beside Harbor's (its
    `enabled_tools`, `system_prompt_id`, ...), for models whose context cannot hold its
    tools and system prompt as it ships."""

    COMMANDS = ("vibe",)

    def __init__(self, *args: Any, settings: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._settings = dict(settings or {})

    def _build_config_toml(self) -> str:
        # Top-level keys go before Harbor's tables ([[providers]], [[models]]): after
        # them, TOML would read them as keys of the last table.
        extra: str = vibe_module._to_toml(self._settings) if self._settings else ""
        harbor_toml: str = super()._build_config_toml()
        return extra + harbor_toml


class PreinstalledOpenHands(_SkipInstallWhenPresent, OpenHands):
    # Its venv is mounted where the adapter runs it from (the pin's venv_at).
    COMMANDS = ("/opt/openhands-venv/bin/python",)


class PreinstalledAntigravitySdk(AntigravitySDK):
    """Harbor's runner script starts `#!/usr/bin/env -S uv run --script`: uv would
    resolve its dependencies from PyPI on every run, which a sandbox cannot reach. The
    pin's venv (mounted at VENV, agent_pins.AgentPin.venv_at) holds those dependencies, so
    the same script goes in with that venv's python as its interpreter."""

    VENV = "/opt/antigravity-sdk-venv"
    RUNNER = "/installed-agent/run_agent.py"

    async def install(self, environment: BaseEnvironment) -> None:
        found = await environment.exec(command=presence_command((f"{self.VENV}/bin/python",)))
        if found.return_code != 0:
            await super().install(environment)
            return
        script = Path(antigravity_sdk.__file__).parent / "antigravity_sdk_runner.py"
        lines = script.read_text().splitlines(keepends=True)
        local = self.logs_dir / "run_agent.py"
        local.write_text(f"#!{self.VENV}/bin/python\n" + "".join(lines[1:]))
        await environment.upload_file(source_path=local, target_path=self.RUNNER)
        await environment.exec(command=f"chmod +x {self.RUNNER}")


class PreinstalledLangGraph(LangGraph):
    """Harbor's install removes its venv's directory, fetches uv from astral.sh and
    builds the venv again from PyPI with the project's dependencies. With the pin's venv
    mounted there (read-only, agent_pins.AgentPin.venv_at), holding what the project needs,
    only the project and Harbor's runner go in; a JavaScript graph still installs."""

    async def install(self, environment: BaseEnvironment) -> None:
        venv_python = self._REMOTE_VENV_DIR / "bin" / "python"
        found = await environment.exec(command=presence_command((str(venv_python),)))
        if found.return_code != 0 or self.graph_runtime == "node":
            await super().install(environment)
            return
        runner = Path(langgraph.__file__).parent / "langgraph_runner.py"
        local = self.logs_dir / runner.name
        local.write_text(runner.read_text())
        await environment.exec(command=f"mkdir -p {self._REMOTE_PROJECT_DIR}")
        await environment.upload_dir(self._staged_project_dir(), str(self._REMOTE_PROJECT_DIR))
        await environment.upload_file(source_path=local, target_path=str(self._REMOTE_RUNNER_PATH))


class PreinstalledClineCli(_SkipInstallWhenPresent, ClineCli):
    """Also takes `provider_base_url`: Harbor's adapter refuses a base URL (its
    connection has nowhere to put one), but cline stores one per provider with
    `cline auth -b URL`, which runs here before the task, for the provider and model
    the run then names."""

    COMMANDS = ("cline", "node")

    def __init__(self, *args: Any, provider_base_url: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._provider_base_url = provider_base_url

    def create_run_agent_commands(self, instruction: str) -> list[ExecInput]:
        setup, *run = super().create_run_agent_commands(instruction)
        if self._provider_base_url is None:
            return [setup, *run]
        # The same variables as the run: its provider, key and model.
        auth = (
            'cline auth -p "$PROVIDER" -k "$API_KEY" -m "$MODELID" '
            f"-b {shlex.quote(self._provider_base_url)}"
        )
        return [setup, ExecInput(command=auth, env=setup.env), *run]


class PreinstalledStrands(Strands):
    """Its venv is mounted where the adapter runs it from (the pin's venv_at): with it
    present, only what Harbor's install puts beside it goes in, the runner and the
    factory's source; without it, Harbor's own install runs."""

    async def install(self, environment: BaseEnvironment) -> None:
        found = await environment.exec(command=presence_command((str(self._PYTHON),)))
        if found.return_code != 0:
            await super().install(environment)
            return
        runner = self.logs_dir / self._RUNNER_PATH.name
        runner.write_text(Path(strands_module.__file__).with_name(runner.name).read_text())
        await self.exec_as_root(environment, command=f"mkdir -p {self._INSTALL_DIR}")
        await environment.upload_file(runner, str(self._RUNNER_PATH))
        source = self._stage_factory_source()
        if source is not None:
            await environment.upload_dir(source, str(self._FACTORY_DIR))
