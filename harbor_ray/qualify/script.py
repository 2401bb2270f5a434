"""The scripted engine's policy: a model that solves a task by its solution commands.

The replies are pure: a function of the conversation the engine is asked to continue
(`scripted_engine` reads the task, and solution.py runs bash to cut and play it). Agents
that call tools get a call of their shell-like tool (picked from the tools the request declares)
running the task's solution (`solution/solve.sh`: the whole script in one call, or one
call per top-level command for a tool that takes one command at a time), then a final
text reply once a tool result came back; terminus-2, whose protocol is text, gets the
same commands as its JSON keystrokes; aider, which changes files only through edits
written in its reply, gets the files the solution leaves (found by running it in a
scratch sandbox, solution.py) as its whole-file edits. Side calls (a title, a memory
manager without a shell tool) get text.
The engine side is always chat completions (the proxy's dialect layer turns the tool
calls into each agent's own form), so tools arrive as chat function tools and results
as `tool` messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harbor_ray.capture.proxy.fake_engine import FakeEngine, FakeReply, Script
from harbor_ray.qualify.solution import (
    solution_edits,
    solution_script,
    split_commands,
    typed_command,
)

__all__ = [
    "FINAL_TEXT",
    "SHELL_TOOLS",
    "ToolSolver",
    "scripted_engine",
    "terminus_script",
    "whole_file_edits",
]

# The shell-like tool of each qualified CLI, and the argument that holds the command
# (codex exec_command, claude-code and kimi-code Bash, gemini-cli and qwen-code
# run_shell_command, opencode, pi, copilot-cli, mini-swe-agent and vibe bash,
# code-puppy shell, openhands-sdk terminal, openhands execute_bash, openclaw exec,
# antigravity-sdk run_command, cline-cli run_commands, strands' sandbox_shell): names as
# their requests declare them.
SHELL_TOOLS: Mapping[str, str] = MappingProxyType(
    {
        "exec": "command",
        "exec_command": "cmd",
        "Bash": "command",
        "run_shell_command": "command",
        "bash": "command",
        "shell": "command",
        "terminal": "command",
        "execute_bash": "command",
        "run_command": "CommandLine",
        "run_commands": "commands",
        "sandbox_shell": "command",
    }
)
# Shell tools whose argument is a list of commands (cline-cli's run_commands): the
# solution goes as its one element, heredocs and all.
_COMMAND_LISTS = frozenset({"run_commands"})
# Every other argument of a shell tool whose CLI sends a call back with all of them
# filled in (code-puppy: pydantic-ai's validated arguments, defaults included): a call
# that spells them out, in the tool's order, comes back as it was sampled, where one
# that leaves them out would come back rewritten and start a new root.
_SPELLED_OUT: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "shell": {"cwd": None, "timeout": 60, "background": False},
        # Not echoed back, but its schema requires it (openhands 0.62's execute_bash).
        "execute_bash": {"security_risk": "LOW"},
        # Required by antigravity-sdk 0.1.22's run_command: a command not done within
        # WaitMsBeforeAsync (10000 at most) goes to the background, its output to a later
        # message; the summary and action are labels its schema requires of every tool.
        "run_command": {
            "Cwd": "/app",
            "WaitMsBeforeAsync": 10000,
            "toolSummary": "Task solution",
            "toolAction": "Running solution",
        },
    }
)
# Agents that end only on a command of their own, not on a text reply: shell calls made
# after the solution's.
_FINISH: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "mini-swe-agent": ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",),
        "fabric": ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",),  # its mini-swe-agent adapter
    }
)
FINAL_TEXT = "Done: the task's commands ran."
# Agents that end only on a tool call of their own: openhands takes a text reply for a
# question to the user, answers itself "continue" when headless, and stops as stuck.
_FINAL_CALL: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "openhands": ("finish", MappingProxyType({"message": FINAL_TEXT})),
        # cline-cli answers a text reply with "[SYSTEM] This run is not complete until you
        # call one of these terminal completion tools: submit_and_exit".
        "cline-cli": ("submit_and_exit", MappingProxyType({"summary": FINAL_TEXT})),
    }
)
# Agents that edit files only through their reply's text, in aider's "whole" format: a
# file's path on a line of its own, then its entire content in a fence (the format aider
# picks for a model it does not know, as Harbor runs it).
_WHOLE_FILE_AGENTS = frozenset({"aider"})
_FENCE = "```"
# Agents whose shell tool runs one top-level command per call: openhands' execute_bash
# and openhands-sdk's terminal parse the command with bashlex and answer "Cannot execute
# multiple commands at once" to a script of several lines' commands. They get one call
# per command, cut where bash ends it (a heredoc, an `if` or a quoted newline kept in one
# call); their terminal session keeps the working directory and variables between calls.
# Their commands, and terminus-2's keystrokes, are typed into an interactive shell in a
# tmux pane, where a tab in a heredoc would complete a name (seen: openhands-sdk wrote a
# tabbed line without its tab): such a command is typed as an `eval` of it, escaped.
_ONE_COMMAND_AGENTS = frozenset({"openhands", "openhands-sdk"})


def whole_file_edits(files: Mapping[str, str]) -> str:
    """A reply that writes `files` in aider's whole-file format."""
    return "\n".join(
        f"{name}\n{_FENCE}\n{content.removesuffix(chr(10))}\n{_FENCE}\n"
        for name, content in files.items()
    )


@dataclass(frozen=True)
class ToolSolver:
    """Replies for a tool-calling agent: `steps` shell commands, one call each, then text
    (or `final_call`, a (tool, arguments) call, where the agent ends only on one)."""

    steps: tuple[str, ...]
    final_call: tuple[str, Mapping[str, Any]] | None = None

    def __call__(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> FakeReply:
        done = sum(1 for m in messages if m.get("role") == "tool")
        shell = _shell_tool(tools)
        if shell is not None and done >= len(self.steps) and self.final_call is not None:
            name, arguments = self.final_call
            return FakeReply(tool_calls=((name, dict(arguments)),))
        if shell is None or done >= len(self.steps):
            return FakeReply(text=FINAL_TEXT)
        name, argument = shell
        step = self.steps[done]
        call = {argument: [step] if name in _COMMAND_LISTS else step, **_SPELLED_OUT.get(name, {})}
        return FakeReply(tool_calls=((name, call),))


def _shell_tool(tools: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(name, command argument) of the first declared tool that is a known shell."""
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name in SHELL_TOOLS:
            return name, SHELL_TOOLS[name]
    return None


def terminus_script(keystrokes: str) -> Script:
    """terminus-2's JSON protocol: act once, then claim completion twice (it confirms)."""

    def script(messages: list[dict[str, Any]]) -> FakeReply:
        acted = sum(1 for m in messages if m.get("role") == "assistant")
        if acted == 0:
            reply = {
                "analysis": "Empty directory.",
                "plan": "Write the file.",
                "commands": [{"keystrokes": keystrokes, "duration": 0.5}],
                "task_complete": False,
            }
        else:
            reply = {"analysis": "Done.", "plan": "Finish.", "commands": [], "task_complete": True}
        return FakeReply(text=json.dumps(reply))

    return script


def scripted_engine(agent: str, task_dir: Path, workdir: str | None = None) -> FakeEngine:
    """An engine (vLLM's API with token ids, fake_engine.py) whose model solves the task
    at `task_dir` as `agent` speaks: tool calls for tool-calling agents, terminus-2's
    JSON for terminus-2, whole-file edits for aider (of the files in `workdir`, the
    task's; None: the sandboxes' default)."""
    if agent in _WHOLE_FILE_AGENTS:
        # Every call gets the edits: aider asks once per message, and again only to
        # reflect on edits it could not apply.
        edits = FakeReply(text=whole_file_edits(solution_edits(task_dir, workdir)))
        return FakeEngine(script=lambda _messages: edits)
    script = solution_script(task_dir)
    if agent == "terminus-2":
        typed = "".join(typed_command(c) + "\n" for c in split_commands(script))
        return FakeEngine(script=terminus_script(typed))
    steps = (
        tuple(map(typed_command, split_commands(script)))
        if agent in _ONE_COMMAND_AGENTS
        else (script,)
    )
    return FakeEngine(
        tool_script=ToolSolver((*steps, *_FINISH.get(agent, ())), _FINAL_CALL.get(agent))
    )
