"""Cross-checking an agent's ATIF trajectory against the captured session of its calls."""

from __future__ import annotations

from typing import Any

from harbor.models.trajectories.trajectory import Trajectory

from harbor_ray.capture.core.record import ClosedCapture, close_capture
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.trials.atif import cross_check
from tests.capture.turns_factory import chain, follow, turn


def capture(*turns: TurnRecord) -> ClosedCapture:
    return close_capture(turns)


def trajectory(*steps: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An ATIF document as an agent writes it to agent/trajectory.json."""
    numbered = [{"step_id": i, **step} for i, step in enumerate(steps, start=1)]
    return {
        "schema_version": "ATIF-v1.6",
        "session_id": "session-1",
        "agent": {"name": "terminus-2", "version": "2.0.0"},
        "steps": numbered,
        **fields,
    }


def system(text: str = "You are an agent. Task: say hello.", **fields: Any) -> dict[str, Any]:
    return {"source": "system", "message": text, **fields}


def agent(message: Any = "", **fields: Any) -> dict[str, Any]:
    return {"source": "agent", "message": message, **fields}


def with_tokens(record: TurnRecord, message: str = "Analysis: ok\nPlan: go") -> dict[str, Any]:
    """terminus-2's step for a call, with collect_rollout_details: the engine's own ids."""
    assert record.prompt_ids is not None and record.token_ids is not None
    metrics = {
        "prompt_token_ids": record.prompt_ids.tolist(),
        "completion_token_ids": record.token_ids.tolist(),
    }
    return agent(message, metrics=metrics)


def codes(findings) -> list[tuple[str, str, int | None]]:
    return [(f.code, f.severity, f.turn) for f in findings]


def test_an_absent_trajectory_is_only_information():
    [finding] = cross_check(None, capture(*chain(2)))
    assert (finding.code, finding.severity, finding.turn) == ("atif_absent", "info", None)
    assert finding.message == "the agent wrote no ATIF trajectory"


def test_token_ids_that_match_call_for_call_give_no_findings():
    turns = chain(3)
    doc = trajectory(system(), *(with_tokens(t) for t in turns))
    assert cross_check(doc, capture(*turns)) == []


def test_a_parsed_trajectory_is_accepted_as_well_as_a_dict():
    turns = chain(2)
    doc = Trajectory.model_validate(trajectory(system(), *(with_tokens(t) for t in turns)))
    assert cross_check(doc, capture(*turns)) == []


def test_reply_text_that_matches_up_to_whitespace_gives_no_findings():
    turns = chain(3)  # the captured replies are "reply 0", "reply 1", "reply 2"
    doc = trajectory(
        system(),
        agent("reply 0"),
        {"source": "user", "message": "continue"},
        agent("  reply\n\t1 "),
        agent([{"type": "text", "text": "reply"}, {"type": "text", "text": "2"}]),
    )
    assert cross_check(doc, capture(*turns)) == []


def test_rewritten_text_without_tokens_is_no_mismatch_but_the_order_goes_unchecked():
    turns = chain(2)
    doc = trajectory(system(), agent("Analysis: look\nPlan: ls"), agent("Analysis: done"))
    [finding] = cross_check(doc, capture(*turns))
    assert (finding.code, finding.severity) == ("atif_order_unchecked", "info")


def test_fewer_recorded_calls_than_captured_ones_is_a_count_mismatch():
    turns = chain(3)
    doc = trajectory(system(), *(with_tokens(t) for t in turns[:2]))
    [finding] = cross_check(doc, capture(*turns))
    assert (finding.code, finding.severity) == ("atif_call_count_mismatch", "warn")
    assert finding.message == (
        "the agent's trajectory records 2 model calls, the capture holds 3 agent calls"
    )


def test_more_recorded_calls_than_captured_ones_is_a_count_mismatch():
    turns = chain(2)
    doc = trajectory(system(), agent("reply 0"), agent("reply 1"), agent("a third reply"))
    assert codes(cross_check(doc, capture(*turns))) == [("atif_call_count_mismatch", "warn", None)]


def test_swapped_calls_are_an_order_mismatch_by_tokens():
    t0, t1, t2 = chain(3)
    doc = trajectory(system(), with_tokens(t1), with_tokens(t0), with_tokens(t2))
    [finding] = cross_check(doc, capture(t0, t1, t2))
    assert (finding.code, finding.severity, finding.turn) == ("atif_order_mismatch", "warn", 0)
    assert finding.message == (
        "ATIF steps out of the captured order: 3 (step 3 matches captured turn 0, "
        "which precedes the calls matched before it)"
    )


def test_swapped_calls_are_an_order_mismatch_by_text():
    doc = trajectory(system(), agent("reply 0"), agent("reply 2"), agent("reply 1"))
    [finding] = cross_check(doc, capture(*chain(3)))
    assert (finding.code, finding.turn) == ("atif_order_mismatch", 1)


def test_completion_ids_that_differ_are_a_token_mismatch_at_that_turn():
    t0, t1, t2 = chain(3)
    step = with_tokens(t1)
    step["metrics"]["completion_token_ids"] = [999]
    doc = trajectory(system(), with_tokens(t0), step, with_tokens(t2))
    [finding] = cross_check(doc, capture(t0, t1, t2))
    assert (finding.code, finding.severity, finding.turn) == ("atif_token_mismatch", "warn", 1)
    assert finding.message == (
        "ATIF steps whose token ids no captured agent call has: 3 "
        "(step 3 vs captured turn 1: completion ids differ)"
    )


def test_prompt_ids_that_differ_are_a_token_mismatch_too():
    t0, t1 = chain(2)
    step = with_tokens(t1)
    step["metrics"]["prompt_token_ids"] = step["metrics"]["prompt_token_ids"][:-1]
    doc = trajectory(system(), with_tokens(t0), step)
    [finding] = cross_check(doc, capture(t0, t1))
    assert finding.code == "atif_token_mismatch"
    assert finding.message.endswith("(step 3 vs captured turn 1: prompt ids differ)")


def test_completion_ids_alone_are_enough_to_match():
    turns = chain(2)
    steps = [agent("x", metrics={"completion_token_ids": t.token_ids.tolist()}) for t in turns]
    assert cross_check(trajectory(system(), *steps), capture(*turns)) == []


def test_many_mismatching_steps_make_one_finding_that_lists_a_few():
    turns = chain(8)
    steps = [agent("x", metrics={"completion_token_ids": [900 + k]}) for k in range(8)]
    [finding] = cross_check(trajectory(system(), *steps), capture(*turns))
    assert (finding.code, finding.turn) == ("atif_token_mismatch", 0)
    assert finding.message.startswith(
        "ATIF steps whose token ids no captured agent call has: 2, 3, 4, 5, 6 and 3 more "
    )


def test_steps_with_tokens_but_no_captured_calls_mismatch_on_count_and_tokens():
    [t0] = chain(1)
    findings = cross_check(trajectory(system(), with_tokens(t0)), capture())
    assert codes(findings) == [
        ("atif_call_count_mismatch", "warn", None),
        ("atif_token_mismatch", "warn", None),
    ]
    assert findings[1].message.endswith("(step 2 has no captured turn in its place)")


def test_discarded_retries_and_auxiliary_calls_are_not_the_agents_loop():
    abandoned = turn(0, [1, 2, 3], [10, 11])
    kept = turn(1, [1, 2, 3], [12, 13])
    second = follow(kept, 2, [14, 15], [16, 17])
    title = turn(3, [500, 501], [502], auxiliary=True)
    doc = capture(abandoned, kept, second, title)
    assert [n.role for n in doc.graph.nodes.values()] == [
        "discarded",
        "agent",
        "agent",
        "auxiliary",
    ]
    assert cross_check(trajectory(system(), with_tokens(kept), with_tokens(second)), doc) == []


def test_copied_context_and_deterministic_steps_are_not_calls():
    turns = chain(2)
    doc = trajectory(
        system(),
        agent("reply 0"),
        agent("copied from the summary subagent", is_copied_context=True),
        agent("dispatched a tool without the model", llm_call_count=0),
        agent("reply 1", llm_call_count=1),
    )
    assert cross_check(doc, capture(*turns)) == []


def test_a_step_standing_for_several_calls_is_counted_but_not_paired():
    turns = chain(4)
    doc = trajectory(system(), agent("merged", llm_call_count=2), agent("merged", llm_call_count=2))
    [finding] = cross_check(doc, capture(*turns))
    assert (finding.code, finding.severity) == ("atif_order_unchecked", "info")
    assert finding.message.startswith("a step stands for several model calls")
    short = trajectory(system(), agent("merged", llm_call_count=3))
    assert codes(cross_check(short, capture(*turns))) == [
        ("atif_call_count_mismatch", "warn", None),
        ("atif_order_unchecked", "info", None),
    ]


def subagent(trajectory_id: str, *texts: str) -> dict[str, Any]:
    doc = trajectory({"source": "user", "message": "summarise"}, *(agent(t) for t in texts))
    return {**doc, "trajectory_id": trajectory_id}


def test_embedded_subagent_calls_are_compared_with_the_auxiliary_turns():
    t0, t1 = chain(2)
    summary = turn(2, [700, 701], [702], auxiliary=True)
    doc = trajectory(
        system(),
        agent("reply 0"),
        agent("reply 1"),
        subagent_trajectories=[subagent("summary-1", "the summary")],
    )
    assert cross_check(doc, capture(t0, t1, summary)) == []
    [finding] = cross_check(doc, capture(t0, t1))
    assert (finding.code, finding.severity) == ("atif_call_count_mismatch", "warn")
    assert finding.message == (
        "the agent's subagents record 1 model calls, the capture holds 0 auxiliary calls"
    )


def test_subagents_in_separate_files_are_named_when_the_counts_differ():
    # terminus-2's summarisation: three subagent files, referenced from a system step;
    # the proxy could not tell those calls apart and recorded them as agent turns.
    turns = chain(2) + [turn(2 + k, [800 + k], [900 + k]) for k in range(3)]
    refs = [
        {"trajectory_path": f"trajectory.summarization-1-{part}.json"}
        for part in ("summary", "questions", "answers")
    ]
    handoff = system(
        "Performed context summarization and handoff to continue task.",
        observation={"results": [{"subagent_trajectory_ref": refs}]},
    )
    doc = trajectory(system(), agent("reply 0"), handoff, agent("reply 1"))
    [finding] = cross_check(doc, capture(*turns))
    assert finding.code == "atif_call_count_mismatch"
    assert finding.message == (
        "the agent's trajectory records 2 model calls, the capture holds 5 agent calls; "
        "3 subagent trajectories are stored in separate files, and their calls count as "
        "agent calls unless the capture marked them auxiliary"
    )


def test_a_document_that_is_not_atif_is_a_warning_not_a_crash():
    bad = trajectory(system(), agent("reply 0"))
    bad["steps"][1]["step_id"] = 5
    [finding] = cross_check(bad, capture(*chain(1)))
    assert (finding.code, finding.severity) == ("atif_invalid", "warn")
    assert finding.message == (
        "the agent's trajectory is not valid ATIF: "
        "Value error, steps[1].step_id: expected 2 (sequential from 1), got 5"
    )
    [missing] = cross_check({"steps": []}, capture(*chain(1)))
    assert missing.code == "atif_invalid"
    assert missing.message == (
        "the agent's trajectory is not valid ATIF: agent: Field required (and 1 more problems)"
    )


def test_calls_answered_with_the_budget_stop_may_be_recorded_or_not():
    """terminus-2 records the budget stop's reply as a step; the capture rightly holds
    no turn for it. Up to that many extra steps are no mismatch; one more is."""
    turns = chain(2)
    steps = [with_tokens(t) for t in turns]
    stopped = close_capture(turns, budget_stops=1)
    assert cross_check(trajectory(system(), *steps, agent("budget spent")), stopped) == []
    assert cross_check(trajectory(system(), *steps), stopped) == []
    [finding] = cross_check(trajectory(system(), *steps, agent("stop"), agent("stop")), stopped)
    assert finding.message == (
        "the agent's trajectory records 4 model calls, the capture "
        "holds 2 agent calls and 1 answered with the budget stop"
    )
    # Without a budget stop the extra step is a mismatch, as before.
    assert codes(
        cross_check(trajectory(system(), *steps, agent("budget spent")), capture(*turns))
    ) == [("atif_call_count_mismatch", "warn", None)]
