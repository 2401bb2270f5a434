"""`harbor_ray.playground.outcome` and a run's settings: pass or fail by reward (never
by `ok` alone), finish reasons labelled and counted, budget stops and phases kept, a
run whose every rollout errored named so, and a visitor's engine URL stored without its
credentials."""

from __future__ import annotations

from harbor_ray.capture.core.record import CaptureCounts
from harbor_ray.playground.form import RunForm
from harbor_ray.playground.outcome import all_errored, finishes, outcome_view, verdict
from tests.data.rollouts import rollout


def test_the_verdict_is_the_reward_s_not_ok_s() -> None:
    assert verdict(0.0, None) == "fail"  # ran cleanly, reward 0: not a pass
    assert verdict(1.0, None) == "pass" and verdict(0.5, None) == "partial"
    assert verdict(None, None) == "no reward" and verdict(1.0, "agent_error") == "error"


def test_finish_reasons_are_counted_most_first_and_labelled() -> None:
    assert finishes(["tool_calls", "length", "length", "odd"]) == [
        {"reason": "length", "count": 2, "label": "cut off at max tokens"},
        {"reason": "tool_calls", "count": 1, "label": "called a tool"},
        {"reason": "odd", "count": 1, "label": None},
    ]


def test_an_outcome_says_why_it_stopped_its_phases_and_its_verdict() -> None:
    result = rollout("r0", None, reward=0.0).result
    counts = CaptureCounts(
        turns=3, roots=1, agent_roots=1, sequences=1, discarded=0, engine_errors=0, budget_stops=2
    )
    view = outcome_view(
        result.model_copy(update={"counts": counts}), ["length", "length", "stop"], "1 passed"
    )
    assert view["ok"] is result.ok and view["verdict"] == "fail"
    assert view["truncated"] == 2 and view["budget_stops"] == 2
    assert view["timings"] == {"agent_execution": 9.5, "total": 12.25}
    assert view["duration_s"] == 12.25 and view["model"] == "test-model"
    assert view["verifier_output"] == "1 passed"
    assert outcome_view(result, [], None)["budget_stops"] is None  # no capture: unknown


def test_a_run_is_failed_when_every_rollout_errored() -> None:
    broke = {"error_type": "agent_setup", "error": "npm: not found"}
    assert all_errored([broke, broke]) == (
        "every rollout failed (2); the first: agent_setup: npm: not found"
    )
    assert all_errored([broke, {"error_type": None, "error": None}]) is None
    assert all_errored([]) is None


def test_a_run_s_settings_hide_a_visitor_engine_s_credentials() -> None:
    form = RunForm(
        agent="terminus-2",
        dataset="samples",
        task="hello-file",
        engine="visitor",
        llm_url="http://me:pw@engine.example:8000/v1",
        temperature=0.2,
        max_tokens=64,
    )
    assert form.settings("qwen") == {
        "model": "qwen",
        "engine": "http://[hidden]@engine.example:8000/v1",
        "agent": "terminus-2",
        "temperature": 0.2,
        "max_tokens": 64,
        "budget": 20,
        "attempts": 1,
    }
    server = form.model_copy(update={"engine": "server"})
    assert server.settings(None)["engine"] == "the server's"
