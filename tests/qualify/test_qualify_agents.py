"""`harbor-ray qualify` end to end, both levels, for every qualified agent: the real
CLIs (installed once per test session into the shared agent cache, as `harbor-ray agents
install` does, ahead: tests/fixtures/agents.py) in the real bwrap sandbox, through the
in-process capture proxy.

Level 1 plays the scripted engine: each agent must solve hello-file (reward 1.0) in one
agent root with the engine's exact ids. Level 2 uses the session's one real engine
(tests/fixtures/engine.py) with small budgets, for today's cells of the rotation over
every agent x profile (tests/qualify/rotation.py; the test id names them): a captured
turn and no infrastructure error per cell, and the capture as exact as at level 1 (one
agent root but for an agent that rewrites its history, no split, no 4xx). At both
levels each cell speaks the dialect its routes show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_ray.qualify.report import REWRITES_HISTORY
from harbor_ray.qualify.run import QUALIFIED
from harbor_ray.qualify.solution import split_commands, typed_command
from harbor_ray.trials.agent_pins import PINS
from harbor_ray.trials.agents import PROFILES, profiles
from harbor_ray.trials.installs import entry_dir
from tests.fixtures.images import JQ_TASK
from tests.qualify.rotation import CELLS_AT_LEVEL_2, rotating_subset, today
from tests.qualify.test_solution import SCRIPT

pytestmark = pytest.mark.integration

# The dialect each agent's model calls arrive in (their routes, as the proxy saw them).
SPOKEN = {
    "codex": "responses",
    "claude-code": "anthropic",
    "gemini-cli": "google",
    "opencode": "chat",
    "qwen-coder": "chat",
    "mini-swe-agent": "chat",
    "pi": "chat",
    "code-puppy": "chat",
    "copilot-cli": "chat",
    "openhands": "chat",
    "openhands-sdk": "chat",
    "vibe": "chat",
    "kimi-code": "chat",
    "openclaw": "chat",
    "antigravity-sdk": "google",
    "fabric": "chat",
    "langgraph": "chat",
    "aider": "chat",
    "cline-cli": "chat",
    "strands": "chat",
    "terminus-2": "chat",
}
# The profiles besides the defaults that CI runs, a representative few (its time is
# short: their 8 cells take about 55 s of the 16 new cells' 6 min on hello-file, one at
# a time): LiteLLM on the host (terminus-2), a CLI's own clients (copilot-cli), and the
# profile Harbor's layer needs help with (pi google). `qualify --profile all` runs all.
OTHER_PROFILES_IN_CI = ("copilot-cli", "pi", "terminus-2")


# Where each installed openhands keeps the splitter its shell tool refuses a command by
# ("Cannot execute multiple commands at once" when it finds more than one).
SPLITTERS = {
    "openhands-sdk": "openhands.tools.terminal.terminal.terminal_session",
    "openhands": "openhands.runtime.utils.bash",
}


@pytest.mark.parametrize("agent", list(SPLITTERS))
def test_each_command_the_driver_sends_is_one_to_the_harness_own_splitter(
    agents_cache: Path, agent: str
) -> None:
    """The cuts checked by the harness's own code (bashlex in its venv), not by the
    driver's bash: every command sent, as typed, counts as one."""
    sent = [typed_command(c) for c in split_commands(SCRIPT)]
    python = entry_dir(agents_cache, PINS[agent]) / "venv" / "bin" / "python"
    counted = subprocess.run(
        [
            str(python),
            "-c",
            f"import json, sys; from {SPLITTERS[agent]} import "
            "split_bash_commands as split; print(json.dumps([len(split(c)) for c in "
            "json.load(sys.stdin)]))",
        ],
        input=json.dumps(sent),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(counted.stdout) == [1] * len(sent)


def qualify(
    out: Path, cache: Path, *args: str, timeout_s: float, agents: tuple[str, ...] = QUALIFIED
) -> tuple[subprocess.CompletedProcess[str], dict]:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_ray.cli",
            "qualify",
            *agents,
            "--out",
            str(out),
            "--agents-cache",
            str(cache),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    level = "model" if "--llm-url" in args else "scripted"
    report = out / f"qualification-{level}.json"
    assert report.exists(), run.stderr[-5000:]
    assert (out / f"qualification-{level}.md").exists()
    return run, json.loads(report.read_text())


def test_level_1_every_agent_solves_hello_file_in_one_root(
    tmp_path: Path, agents_cache: Path
) -> None:
    run, report = qualify(tmp_path, agents_cache, "--concurrency", "3", timeout_s=1500)
    rows = {row["agent"]: row for row in report["rows"]}
    assert list(rows) == list(QUALIFIED)
    for agent, row in rows.items():
        assert row["qualified"], (agent, row["why"], row["error"])
        assert row["reward"] == 1.0 and row["agent_roots"] == 1 and row["splits"] == 0
        assert row["exact_ids"] is True and row["proxy_4xx"] == 0
        assert row["version"] == (PINS[agent].version if agent in PINS else report["harbor"])
    assert run.returncode == 0, run.stderr[-3000:]
    # Side calls stay out of the agent's root: opencode's title generator.
    assert rows["opencode"]["auxiliary_turns"] >= 1
    assert {agent: row["dialect"] for agent, row in rows.items()} == SPOKEN


def test_level_1_other_profiles_solve_hello_file_in_one_root(
    tmp_path: Path, agents_cache: Path
) -> None:
    run, report = qualify(
        tmp_path,
        agents_cache,
        "--profile",
        "all",
        "--concurrency",
        "3",
        agents=OTHER_PROFILES_IN_CI,
        timeout_s=900,
    )
    cells = {(row["agent"], row["profile"]): row for row in report["rows"]}
    assert list(cells) == [(a, p) for a in OTHER_PROFILES_IN_CI for p in profiles(a)]
    spoken = {profile: dialect for dialect, profile in PROFILES.items()}
    for (agent, profile), row in cells.items():
        assert row["qualified"], (agent, profile, row["why"], row["error"])
        assert row["dialect"] == spoken[profile], (agent, profile, row["dialect"])
    assert run.returncode == 0, run.stderr[-3000:]


# The agents whose level 2 cannot pass here (LEVEL_2_BLOCKED, with their reasons) are
# left out of the rotation. `qualify --profile P` asks P of every agent named, so the
# day's cells run as one qualify per profile among them.
@pytest.mark.parametrize(
    "cells",
    [rotating_subset(CELLS_AT_LEVEL_2, today())],
    ids=lambda cells: "+".join(f"{a}:{p}" for a, p in cells),
)
def test_level_2_todays_cells_are_captured_on_the_real_model(
    tmp_path: Path, agents_cache: Path, engine_url: str, cells: tuple[tuple[str, str], ...]
) -> None:
    spoken = {profile: dialect for dialect, profile in PROFILES.items()}
    rows: dict[tuple[str, str], dict] = {}
    runs = []
    for profile in dict.fromkeys(p for _, p in cells):
        agents = tuple(a for a, p in cells if p == profile)
        # Budget 2: opencode's first call is its title generator (auxiliary), so with
        # one call its agent never reached the model.
        run, report = qualify(
            tmp_path / profile,
            agents_cache,
            "--llm-url",
            engine_url,
            "--profile",
            profile,
            "--budget",
            "2",
            "--max-tokens",
            "32",
            "--deadline",
            "300",
            "--concurrency",
            "3",
            agents=agents,
            timeout_s=2400,
        )
        assert report["engine"] != "scripted"
        runs.append(run)
        rows |= {(row["agent"], row["profile"]): row for row in report["rows"]}
    assert sorted(rows) == sorted(cells)
    for (agent, profile), row in rows.items():
        assert row["qualified"], (agent, profile, row["why"], row["error"])
        assert row["turns"] >= 1 and row["exact_ids"] is True
        assert row["splits"] == 0 and row["proxy_4xx"] == 0, (agent, row["refusals"])
        assert row["agent_roots"] == 1 or (agent in REWRITES_HISTORY and row["agent_roots"] > 1), (
            agent,
            row,
        )
        assert row["dialect"] == spoken[profile], (agent, profile, row["dialect"])
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]


# In the container sandbox, on a task whose image is the task (tests/fixtures/images.py):
# terminus-2 (on the host, driving tmux in the image) and two CLIs (inside the image,
# their Node mounted from the host, the proxy reached through the relay on the image's
# python3).
IN_THE_IMAGE = ("codex", "claude-code", "terminus-2")


def in_the_image(images_dir: Path) -> tuple[str, ...]:
    return (
        "--sandbox",
        "container",
        "--sandbox-arg",
        f"images_dir={images_dir}",
        "--dataset",
        str(JQ_TASK),
        "--task",
        JQ_TASK.name,
    )


# Its builds and sandboxes' cgroups are not counted as another run's leftovers.
@pytest.mark.usefixtures("containers_to_itself")
def test_level_1_agents_solve_a_task_in_its_own_image(
    tmp_path: Path, agents_cache: Path, images_dir: Path
) -> None:
    run, report = qualify(
        tmp_path,
        agents_cache,
        *in_the_image(images_dir),
        "--concurrency",
        "3",
        agents=IN_THE_IMAGE,
        timeout_s=900,
    )
    rows = {row["agent"]: row for row in report["rows"]}
    assert list(rows) == list(IN_THE_IMAGE)
    for agent, row in rows.items():
        # Reward 1 exists only in the image: its data file is nowhere else.
        assert row["qualified"], (agent, row["why"], row["error"])
        assert row["reward"] == 1.0 and row["agent_roots"] == 1 and row["splits"] == 0
        assert row["exact_ids"] is True and row["proxy_4xx"] == 0
    assert run.returncode == 0, run.stderr[-3000:]


def test_level_2_agents_are_captured_on_the_real_model_in_a_tasks_own_image(
    tmp_path: Path, agents_cache: Path, images_dir: Path, engine_url: str
) -> None:
    run, report = qualify(
        tmp_path,
        agents_cache,
        *in_the_image(images_dir),
        "--llm-url",
        engine_url,
        "--budget",
        "2",
        "--max-tokens",
        "32",
        "--deadline",
        "300",
        "--concurrency",
        "3",
        agents=IN_THE_IMAGE,
        timeout_s=1500,
    )
    rows = {row["agent"]: row for row in report["rows"]}
    assert list(rows) == list(IN_THE_IMAGE)
    for agent, row in rows.items():
        assert row["qualified"], (agent, row["why"], row["error"])
        assert row["turns"] >= 1 and row["exact_ids"] is True and row["agent_roots"] == 1
        assert row["splits"] == 0 and row["proxy_4xx"] == 0, (agent, row["refusals"])
    assert run.returncode == 0, run.stderr[-3000:]
