"""harbor_ray's sample Strands agent: the factory Harbor's `strands` harness runs when a
rollout names no factory of its own (`--agent-kwarg factory_path=...` for yours).

Harbor's Strands runner calls `create_agent(sandbox, model=...)` inside the task's
sandbox, with the model it built from the rollout's connection (the capture proxy) and
a sandbox that vends Strands' standard tools in the task's working directory: a shell
(`sandbox_shell`) and a file editor (`sandbox_file_editor`). This agent is those tools
and a short system prompt, nothing else: a plain coding agent to qualify the harness with.
"""

from __future__ import annotations

from typing import Any

from strands import Agent

SYSTEM_PROMPT = (
    "You are a coding agent working in a Linux sandbox. Complete the user's task by "
    "running shell commands and editing files with your tools, check the result, then "
    "say briefly what you did."
)


def create_agent(sandbox: Any, model: Any = None) -> Agent:
    """The agent Harbor's runner invokes with the task's instruction."""
    return Agent(
        model=model, tools=sandbox.get_tools(), system_prompt=SYSTEM_PROMPT, callback_handler=None
    )
