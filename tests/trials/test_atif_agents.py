"""The ATIF cross-check on each qualified agent's own trajectory format: a normal rollout
raises no WARN, a real count mismatch does.

atif_trajectories/<agent>.json are the trajectories the agents wrote on hello-file in a
level-1 qualification run (`harbor-ray qualify`, Harbor 0.25, the pinned CLIs; the proxy
key in terminus-2's redacted; cline-cli's and strands' from the scripted engine's
openai-chat rows). code-puppy and vibe (whose session log Harbor 0.25 did not turn into
one), fabric (its Relay telemetry, which writes one, is off as Harbor runs it by
default), langgraph (Harbor's runner writes its result and a summary) and aider (whose
adapter writes none) write none (atif_absent, INFO). The captured
side of each run is rebuilt here from what the run's report counted: its agent calls, and
opencode's title call, which the capture marks auxiliary and the agent does not record.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harbor_ray.capture.core.findings import Severity
from harbor_ray.capture.core.record import close_capture
from harbor_ray.trials.atif import AtifCode, cross_check
from tests.capture.turns_factory import chain, turn

TRAJECTORIES = Path(__file__).parent / "atif_trajectories"

# Each run's captured agent calls (turns less auxiliary ones, from its report row).
AGENT_CALLS = {
    "antigravity-sdk": 2,
    "claude-code": 2,
    "codex": 2,
    "copilot-cli": 2,
    "gemini-cli": 2,
    "mini-swe-agent": 2,
    "openhands": 2,
    "openhands-sdk": 2,
    "opencode": 2,
    "pi": 2,
    "qwen-coder": 2,
    "terminus-2": 3,
    "cline-cli": 4,
    "strands": 2,
}
# Captured side calls the agent's trajectory leaves out.
AUXILIARY = {"opencode": 1}


def recorded(agent: str) -> dict:
    return orjson.loads((TRAJECTORIES / f"{agent}.json").read_bytes())


def captured(agent: str, agent_calls: int, budget_stops: int = 0):
    side = [
        turn(100 + i, [900 + i], [950 + i], auxiliary=True) for i in range(AUXILIARY.get(agent, 0))
    ]
    return close_capture([*chain(agent_calls), *side], budget_stops=budget_stops)


def warnings(findings) -> list[str]:
    return [f.code for f in findings if f.severity == Severity.WARN]


def test_every_agent_with_a_trajectory_has_one_here() -> None:
    assert {path.stem for path in TRAJECTORIES.glob("*.json")} == AGENT_CALLS.keys()


@pytest.mark.parametrize("agent", sorted(AGENT_CALLS))
def test_a_normal_rollout_raises_no_warning(agent: str) -> None:
    assert warnings(cross_check(recorded(agent), captured(agent, AGENT_CALLS[agent]))) == []


@pytest.mark.parametrize("agent", sorted(AGENT_CALLS))
def test_a_call_the_agent_did_not_record_is_still_a_mismatch(agent: str) -> None:
    assert warnings(cross_check(recorded(agent), captured(agent, AGENT_CALLS[agent] + 1))) == [
        AtifCode.CALL_COUNT_MISMATCH
    ]


@pytest.mark.parametrize("agent", sorted(AGENT_CALLS))
def test_a_recorded_call_the_capture_lacks_is_still_a_mismatch(agent: str) -> None:
    assert warnings(cross_check(recorded(agent), captured(agent, AGENT_CALLS[agent] - 1))) == [
        AtifCode.CALL_COUNT_MISMATCH
    ]


def test_terminus_2_recording_the_budget_stops_reply_is_no_mismatch() -> None:
    """Under a budget its last recorded step is the reply to the call the budget stopped:
    no captured turn, but no mismatch either."""
    doc = recorded("terminus-2")
    stopped = captured("terminus-2", AGENT_CALLS["terminus-2"] - 1, budget_stops=1)
    assert warnings(cross_check(doc, stopped)) == []
