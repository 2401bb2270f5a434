"""The scripted engine's policy on what the CLIs really declare: the tools of recorded
requests, translated to the engine's chat form by the proxy's own dialects."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from harbor.models.agent.context import AgentContext

from harbor_ray.capture.core.dialects import DIALECTS
from harbor_ray.qualify.script import FINAL_TEXT, ToolSolver, scripted_engine
from harbor_ray.qualify.solution import solution_edits, solution_script
from harbor_ray.trials.datasets import resolve_dataset, select_tasks

BODIES = Path(__file__).resolve().parent.parent / "agent_bodies"


def engine_tools(cli: str, what: str, dialect: str) -> list[dict]:
    """The chat tools the engine gets for a recorded request."""
    request = json.loads((BODIES / cli / f"{what}.json").read_text())
    body = request["body"]
    url_model = "fake-model" if dialect == "google" else None
    call = DIALECTS[dialect].to_engine(body, url_model=url_model, url_stream=True)
    return call.body.get("tools") or []


@pytest.mark.parametrize(
    ("cli", "what", "dialect", "tool", "argument"),
    [
        ("codex-0.171.0", "responses-first-turn", "responses", "exec_command", "cmd"),
        ("claude-code-2.1.197", "messages-first-turn", "anthropic", "Bash", "command"),
        ("gemini-cli-0.61.0", "stream-generate-content", "google", "run_shell_command", "command"),
        ("opencode-1.18.33", "side-control-main-loop", "chat", "bash", "command"),
        ("qwen-code-0.15.10", "chat-completions", "chat", "run_shell_command", "command"),
    ],
)
def test_the_shell_tool_is_picked_from_what_each_cli_declares(
    cli: str, what: str, dialect: str, tool: str, argument: str
) -> None:
    tools = engine_tools(cli, what, dialect)
    reply = ToolSolver(("echo hi > /app/x",))([{"role": "user", "content": "go"}], tools)
    assert reply.tool_calls == ((tool, {argument: "echo hi > /app/x"}),)
    assert reply.text == ""


def test_antigravity_sdk_s_run_command_gets_every_argument_its_schema_requires() -> None:
    tools = engine_tools("antigravity-sdk-0.1.22", "stream-generate-content", "google")
    run_command = next(t["function"] for t in tools if t["function"]["name"] == "run_command")
    (call,) = ToolSolver(("echo hi",))([{"role": "user", "content": "go"}], tools).tool_calls
    assert call[0] == "run_command" and call[1]["CommandLine"] == "echo hi"
    assert set(run_command["parameters"]["required"]) <= set(call[1])
    assert call[1]["WaitMsBeforeAsync"] == 10000  # its maximum: the solution runs in the call


def test_openhands_sdk_s_terminal_tool_is_its_shell() -> None:
    # openhands-tools' TerminalTool: {"command": ..., "is_input": ..., "timeout": ...}.
    tools = [
        {"type": "function", "function": {"name": "file_editor", "parameters": {}}},
        {"type": "function", "function": {"name": "terminal", "parameters": {}}},
    ]
    reply = ToolSolver(("echo hi",))([{"role": "user", "content": "go"}], tools)
    assert reply.tool_calls == (("terminal", {"command": "echo hi"}),)


async def test_openhands_runs_execute_bash_then_ends_on_its_finish_tool(
    tmp_path: Path,
) -> None:
    # openhands 0.62's execute_bash requires security_risk; a text reply would be taken
    # for a question to the user (headless, it answers itself "continue").
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "solve.sh").write_text("#!/bin/bash\necho hi > /app/x\n")
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {}}}
        for n in ("execute_bash", "think", "finish")
    ]
    script = scripted_engine("openhands", tmp_path).tool_script
    assert script is not None
    history: list[dict] = [{"role": "user", "content": "go"}]
    assert script(history, tools).tool_calls == (
        ("execute_bash", {"command": "echo hi > /app/x", "security_risk": "LOW"}),
    )
    history += [{"role": "assistant", "content": ""}, {"role": "tool", "content": ""}]
    assert script(history, tools).tool_calls == (("finish", {"message": FINAL_TEXT}),)


async def test_cline_runs_the_solution_as_one_command_of_its_list_then_submits(
    tmp_path: Path,
) -> None:
    # cline 3.0.65's run_commands takes {"commands": [...]}, each a complete command (a
    # heredoc kept whole); a text reply gets "[SYSTEM] This run is not complete until
    # you call one of these terminal completion tools: submit_and_exit".
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "solve.sh").write_text("#!/bin/bash\ncat > /app/x <<'EOF'\nhi\nEOF\n")
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {}}}
        for n in ("read_files", "run_commands", "editor", "submit_and_exit")
    ]
    script = scripted_engine("cline-cli", tmp_path).tool_script
    assert script is not None
    history: list[dict] = [{"role": "user", "content": "go"}]
    assert script(history, tools).tool_calls == (
        ("run_commands", {"commands": ["cat > /app/x <<'EOF'\nhi\nEOF"]}),
    )
    history += [{"role": "assistant", "content": ""}, {"role": "tool", "content": ""}]
    assert script(history, tools).tool_calls == (("submit_and_exit", {"summary": FINAL_TEXT}),)


def test_strands_sandbox_shell_is_its_shell() -> None:
    # The tools Harbor's Strands runner vends to the factory (harbor_ray's sample uses
    # both): Strands' file editor and shell, renamed for the sandbox.
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {}}}
        for n in ("sandbox_file_editor", "sandbox_shell")
    ]
    reply = ToolSolver(("echo hi",))([{"role": "user", "content": "go"}], tools)
    assert reply.tool_calls == (("sandbox_shell", {"command": "echo hi"}),)


def test_each_step_once_then_a_final_text() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    solver = ToolSolver(("first", "second"))
    history: list[dict] = [{"role": "user", "content": "go"}]
    assert solver(history, tools).tool_calls == (("bash", {"command": "first"}),)
    history += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "ok"}]
    assert solver(history, tools).tool_calls == (("bash", {"command": "second"}),)
    history += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "ok"}]
    assert solver(history, tools).text == FINAL_TEXT


def test_code_puppy_s_shell_call_spells_out_every_argument_in_the_tool_s_order() -> None:
    # code-puppy sends the call back with its defaults filled in: a call of the command
    # alone would come back rewritten (a new root at level 1).
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    (call,) = ToolSolver(("echo hi",))([{"role": "user", "content": "go"}], tools).tool_calls
    assert call[0] == "shell"
    assert list(call[1].items()) == [
        ("command", "echo hi"),
        ("cwd", None),
        ("timeout", 60),
        ("background", False),
    ]


def test_a_call_without_a_shell_tool_gets_text() -> None:
    # A title generator declares no tools; a tool set without any shell gets text too.
    solver = ToolSolver(("echo",))
    assert solver([{"role": "user", "content": "title?"}], []).text == FINAL_TEXT
    other = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    assert solver([{"role": "user", "content": "go"}], other).tool_calls == ()


def sample_dir(name: str) -> Path:
    (task,) = select_tasks(resolve_dataset("samples"), [name])
    return task.path


def test_solution_script_keeps_the_script_but_its_shebang() -> None:
    assert solution_script(sample_dir("hello-file")) == "echo hello > /app/hello.txt"
    # A comment inside a heredoc is file content, not a comment: it stays.
    greet = solution_script(sample_dir("greet-function"))
    assert greet.startswith("cat > /app/greet.sh <<'SCRIPT'\n# Defines the function greet")
    assert not greet.startswith("#!")


@pytest.mark.parametrize("agent", ["mini-swe-agent", "fabric"])  # fabric: its adapter's
async def test_mini_swe_agent_ends_with_its_own_submit_command(agent: str) -> None:
    engine = scripted_engine(agent, sample_dir("hello-file"))
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": "", "tool_call_id": "1"},
        ],
        "tools": tools,
        "logprobs": True,
        "return_token_ids": True,
    }
    reply = await engine.complete(body)
    [call] = reply["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    }
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["choices"][0]["token_ids"] and reply["prompt_token_ids"]


async def test_terminus_2_gets_its_json_protocol_with_the_solution_keystrokes() -> None:
    engine = scripted_engine("terminus-2", sample_dir("hello-file"))
    reply = await engine.complete({"messages": [{"role": "user", "content": "task"}]})
    action = json.loads(reply["choices"][0]["message"]["content"])
    assert action["commands"] == [{"keystrokes": "echo hello > /app/hello.txt\n", "duration": 0.5}]


def test_gemini_cli_can_be_limited_to_its_shell_tool(tmp_path: Path) -> None:
    # The model level's setting for an 8k-context model: gemini-cli's settings.json
    # then declares only run_shell_command (tools.core), the rest of its settings kept.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledGeminiCli

    agent = PreinstalledGeminiCli(
        logs_dir=tmp_path, model_name="gemini/m", **SMALL_CONTEXT_KWARGS["gemini-cli"]
    )
    config, _ = agent._build_settings_config("m", "gemini-api-key")
    assert config is not None and config["tools"] == {"core": ["run_shell_command"]}
    assert config["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    unlimited, _ = PreinstalledGeminiCli(
        logs_dir=tmp_path, model_name="gemini/m"
    )._build_settings_config("m", "gemini-api-key")
    assert unlimited is not None and "tools" not in unlimited


def test_copilot_cli_can_be_limited_to_its_shell_tool(tmp_path: Path) -> None:
    # The model level's setting: copilot declares only the tools named after
    # --available-tools; without the option its flags are Harbor's.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledCopilotCli

    limited = PreinstalledCopilotCli(
        logs_dir=tmp_path, model_name="openai/m", **SMALL_CONTEXT_KWARGS["copilot-cli"]
    )
    assert limited.build_cli_flags().endswith("--available-tools bash")
    unlimited = PreinstalledCopilotCli(logs_dir=tmp_path, model_name="openai/m")
    assert "--available-tools" not in unlimited.build_cli_flags()


async def test_qwen_code_can_run_on_a_short_system_prompt(tmp_path: Path) -> None:
    # The model level's setting: the prompt is written where QWEN_SYSTEM_MD points,
    # before qwen runs.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledQwenCode

    kwargs = SMALL_CONTEXT_KWARGS["qwen-coder"]
    agent = PreinstalledQwenCode(logs_dir=tmp_path, model_name="openai/m", **kwargs)
    assert agent.extra_env["QWEN_SYSTEM_MD"] == PreinstalledQwenCode.SYSTEM_MD
    assert agent._build_effective_settings() == {"tools": {"core": ["run_shell_command"]}}

    commands: list[str] = []

    class Recorder:
        async def exec(self, command: str, **_: object):
            commands.append(command)
            raise RuntimeError("stop here")  # the adapter's own run is not under test

    with pytest.raises(RuntimeError, match="stop here"):
        await agent.run("task", Recorder(), None)  # type: ignore[arg-type]
    assert commands[0] == (
        f"printf %s {shlex.quote(kwargs['system_prompt'])} > {PreinstalledQwenCode.SYSTEM_MD}"
    )


def test_vibe_can_be_limited_by_its_config_settings(tmp_path: Path) -> None:
    # The model level's setting: the keys go at the top of vibe's config.toml, before
    # Harbor's [[providers]] and [[models]] (after them TOML would read them as keys
    # of the last model); without the option the config is Harbor's.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledVibe

    wiring = {
        "model_name": "openai/m",
        "backend": "generic",
        "extra_env": {"VIBE_API_BASE": "http://proxy/v1"},
    }
    settings = SMALL_CONTEXT_KWARGS["vibe"]["settings"]
    limited = tomllib.loads(
        PreinstalledVibe(logs_dir=tmp_path, settings=settings, **wiring)._build_config_toml()
    )
    harbors = tomllib.loads(PreinstalledVibe(logs_dir=tmp_path, **wiring)._build_config_toml())
    assert limited == {**harbors, **settings}
    assert limited["enabled_tools"] == ["bash"] and limited["models"][0]["name"] == "m"
    assert harbors["providers"][0]["api_base"] == "http://proxy/v1"
    assert "enabled_tools" not in harbors


def test_openclaw_can_be_limited_to_its_exec_tool(tmp_path: Path) -> None:
    # The model level's setting goes into the openclaw.json the variant uploads, over
    # Harbor's own keys (the workspace, the headless deny, the provider), which stay.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledOpenClaw

    wiring = {"model_name": "openai/m", "extra_env": {"OPENAI_BASE_URL": "http://proxy/v1"}}
    limited = PreinstalledOpenClaw(
        logs_dir=tmp_path, **SMALL_CONTEXT_KWARGS["openclaw"], **wiring
    )._build_full_openclaw_config()
    harbors = PreinstalledOpenClaw(logs_dir=tmp_path, **wiring)._build_full_openclaw_config()
    assert limited["tools"] == {"allow": ["exec"], "toolSearch": False, "deny": ["message"]}
    assert limited["agents"]["defaults"] == {
        "workspace": ".",
        "skipBootstrap": True,
        "contextInjection": "never",
        "skills": [],
    }
    assert limited["models"] == harbors["models"]
    assert harbors["tools"] == {"deny": ["message"]}


@pytest.mark.parametrize("limited", [True, False])
async def test_kimi_code_can_start_with_an_agent_of_its_shell_tool(
    tmp_path: Path, limited: bool
) -> None:
    # The model level's setting: the agent file is written before kimi runs, and the
    # command that runs kimi names it; without the option the command is Harbor's.
    from harbor_ray.qualify.run import SMALL_CONTEXT_KWARGS
    from harbor_ray.trials.preinstalled import PreinstalledKimiCode, write_text_command
    from tests.trials.test_agents import Recorded, RecordingEnvironment

    kwargs = SMALL_CONTEXT_KWARGS["kimi-code"] if limited else {}
    agent = PreinstalledKimiCode(
        logs_dir=tmp_path / "logs",
        model_name="openai/m",
        extra_env={"OPENAI_BASE_URL": "http://proxy/v1"},
        **kwargs,
    )
    recorded = Recorded()
    await agent.run("task", RecordingEnvironment(tmp_path, recorded), AgentContext())
    commands = [command for command, _ in recorded.execs]
    (run,) = [c for c in commands if "--output-format stream-json" in c]
    named = f"--agent-file {PreinstalledKimiCode.AGENT_FILE} --prompt "
    assert (named in run) is limited
    written = write_text_command(kwargs.get("agent_file", ""), PreinstalledKimiCode.AGENT_FILE)
    assert (written in commands) is limited
    if limited:
        assert commands.index(written) < commands.index(run)
        assert "\ntools: Bash\n" in kwargs["agent_file"]


async def test_aider_gets_the_solution_as_whole_file_edits() -> None:
    engine = scripted_engine("aider", sample_dir("greet-function"))
    reply = await engine.complete({"messages": [{"role": "user", "content": "task"}]})
    text = reply["choices"][0]["message"]["content"]
    # aider's whole format: the path on its own line, then the entire file fenced.
    assert (
        text
        == "greet.sh\n```\n" + solution_edits(sample_dir("greet-function"))["greet.sh"] + "```\n"
    )
    assert "printf 'Hello, %s!\\n' \"$1\"" in text
