"""A LangGraph project with one agent: a model and a shell tool, the sample project
`harbor-ray qualify` runs Harbor's langgraph harness with (a LangGraph user brings their
own project the same way, as the rollout's `project_path` agent kwarg).

`make_graph(config)` is the LangGraph deployment convention Harbor's runner follows: it
builds the graph when the run starts, its model from `config["configurable"]["model"]`
and `["model_kwargs"]` (the base URL and the key Harbor resolved), through LangChain's
`init_chat_model`, so the one project speaks whichever provider the run names.
"""

from __future__ import annotations

import subprocess
from typing import Any

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.tools import tool

WORKDIR = "/app"  # where Harbor tasks work


@tool
def bash(command: str) -> str:
    """Run a bash command in the task's working directory; returns its exit code and
    output."""
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=WORKDIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return f"exit code {done.returncode}\n{done.stdout}{done.stderr}"


def make_graph(config: dict[str, Any]) -> Any:
    configurable = config.get("configurable", {})
    model = init_chat_model(configurable["model"], **configurable.get("model_kwargs", {}))
    return create_agent(
        model,
        tools=[bash],
        system_prompt=(
            "You solve tasks in a Linux environment by running shell commands with the bash "
            f"tool, in {WORKDIR}. When the task is done, answer with a short summary."
        ),
    )
