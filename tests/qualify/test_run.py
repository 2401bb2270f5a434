"""A report row from what a rollout recorded and what the taps saw (`row_of`): pure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.data.result import Provenance
from harbor_ray.qualify.report import QualifyReport
from harbor_ray.qualify.run import QualifyPlan, qualify, report_paths, row_of
from harbor_ray.qualify.taps import Answer, Generation
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.harness import harness_provenance
from tests.capture.turns_factory import chain
from tests.data.rollouts import rollout

CHAT = "/v1/chat/completions"


def generation(turn: TurnRecord) -> Generation:
    """What the engine returned for `turn`'s call."""
    assert turn.prompt_ids is not None and turn.token_ids is not None
    return Generation(
        turn.request_messages_json, tuple(turn.prompt_ids.tolist()), tuple(turn.token_ids.tolist())
    )


def answered(*paths: str, status: int = 200) -> list[Answer]:
    return [Answer("POST", path, status, streamed=True) for path in paths]


def test_each_turn_is_paired_with_its_own_call_s_generation() -> None:
    turns = chain(3)
    record = rollout("r", turns)
    ours = [generation(t) for t in turns]
    # The engine may return concurrent calls in another order than they were admitted.
    assert row_of("codex", record, answered(CHAT), ours[::-1]).exact_ids is True
    first, second = ours[0], ours[1]
    swapped = [
        dataclasses.replace(first, prompt_ids=second.prompt_ids, token_ids=second.token_ids),
        dataclasses.replace(second, prompt_ids=first.prompt_ids, token_ids=first.token_ids),
        ours[2],
    ]
    # The same ids, each stored on the other call's turn: not the engine's for that call.
    assert sorted((g.prompt_ids, g.token_ids) for g in swapped) == sorted(
        (g.prompt_ids, g.token_ids) for g in ours
    )
    assert row_of("codex", record, answered(CHAT), swapped).exact_ids is False
    assert row_of("codex", record, answered(CHAT), ours[:2]).exact_ids is False  # a turn more
    assert row_of("codex", record, answered(CHAT), [*ours, ours[0]]).exact_ids is False
    assert row_of("codex", rollout("r", []), answered(), []).exact_ids is None


def test_a_426_is_listed_but_not_counted_as_a_proxy_4xx() -> None:
    record = rollout("r", chain(1))
    answers = [
        *answered("/v1/responses", status=426),
        *answered("/v1/responses", status=400),
        *answered("/v1/responses"),
    ]
    row = row_of("codex", record, answers, [generation(t) for t in chain(1)])
    assert row.proxy_4xx == 1
    assert row.refusals == ["POST /v1/responses 426", "POST /v1/responses 400"]


def test_the_dialect_is_the_one_the_agent_spoke() -> None:
    record = rollout("r", chain(1))
    # codex is configured for the Responses API; here it spoke chat.
    assert row_of("codex", record, answered(CHAT), []).dialect == "chat"
    google = "/v1beta/models/m:streamGenerateContent"
    assert row_of("gemini-cli", record, answered(google, "/v1/messages"), []).dialect == (
        "anthropic+google"
    )
    # Refused calls and count_tokens are not what the agent's model calls spoke.
    assert (
        row_of(
            "claude-code",
            record,
            [*answered("/v1/messages/count_tokens"), *answered(CHAT, status=400)],
            [],
        ).dialect
        is None
    )


def test_a_rollout_without_a_capture_is_a_row_with_no_turn() -> None:
    # An agent that fails before its first call (Harbor refusing its configuration).
    record = rollout("r", None, reward=None, error_type="internal", error="ValueError: no")
    row = row_of("pi", record, [], [])
    assert (row.turns, row.agent_roots, row.exact_ids, row.dialect) == (0, 0, None, None)
    assert row.error == "ValueError: no"


def test_a_row_carries_its_rollout_s_provenance() -> None:
    made = Provenance(model_source="/models/m", weights_sha256="w", harness_version="h")
    assert (
        row_of("codex", rollout("r", chain(1), provenance=made), answered(CHAT), []).provenance
        == made
    )


async def test_a_solution_the_engine_cannot_play_is_a_row_that_says_why(tmp_path: Path) -> None:
    # make-directory's solution writes no file: aider, which only edits files, has
    # nothing to write. The run goes on and says so in the row (nothing is started).
    (task,) = select_tasks(resolve_dataset("samples"), ["make-directory"])
    plan = QualifyPlan(cells=(("aider", "openai-chat"),), tasks=(task,), out=tmp_path)
    report = await qualify(plan, level="scripted")
    (row,) = report.rows
    assert (row.agent, row.profile, row.task, row.qualified) == (
        "aider",
        "openai-chat",
        "make-directory",
        False,
    )
    assert row.error_type == "task_invalid" and "changes no file" in (row.error or "")
    assert row.why == [
        f"task_invalid: {row.error}",
        "no captured turn",
        "reward None, not 1.0",
        "row not ok",
    ]
    assert not (tmp_path / "trials").exists()


async def test_every_row_says_what_made_it(tmp_path: Path) -> None:
    """The harness as the cell ran it (its profile), on the engine the run started; a
    row whose rollout never ran (aider has no file to write) says so too."""
    (task,) = select_tasks(resolve_dataset("samples"), ["make-directory"])
    plan = QualifyPlan(
        cells=(("oracle", None), ("aider", "openai-chat")), tasks=(task,), out=tmp_path
    )
    engine = Provenance(
        model_source="/models/m", weights_sha256="w", chat_template_sha256="t", tokenizer_sha256="k"
    )
    report = await qualify(plan, level="scripted", engine_provenance=engine)
    written = QualifyReport.model_validate_json(report_paths(tmp_path, "scripted")[0].read_text())
    for rows in (report.rows, written.rows):
        assert [(row.agent, row.turns) for row in rows] == [("oracle", 0), ("aider", 0)]
        for row in rows:
            assert row.provenance == harness_provenance(
                row.agent, profile=row.profile, agent_kwargs={}
            ).with_engine(engine)
    assert report.rows[0].error_type is None  # the oracle ran; aider did not
