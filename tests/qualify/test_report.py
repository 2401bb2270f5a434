"""The qualification verdict and report rendering: pure."""

from __future__ import annotations

from harbor_ray.qualify.report import (
    REWRITES_HISTORY,
    HarnessRow,
    QualifyReport,
    QualifyRow,
    problems,
    render_markdown,
)


def row(**values) -> QualifyRow:
    base = dict(
        agent="codex",
        profile="openai-responses",
        version="0.171.0",
        dialect="responses",
        streaming="yes",
        task="hello-file",
        row_ok=True,
        turns=2,
        agent_roots=1,
        auxiliary_turns=0,
        splits=0,
        stitched=1,
        reward=1.0,
        proxy_4xx=0,
        exact_ids=True,
    )
    return QualifyRow(**{**base, **values})


def test_a_solved_single_root_row_qualifies_at_both_levels() -> None:
    assert problems(row(), "scripted") == []
    assert problems(row(), "model") == []


def test_scripted_level_names_every_failure() -> None:
    bad = row(
        reward=0.0,
        row_ok=False,
        agent_roots=3,
        splits=2,
        exact_ids=False,
        proxy_4xx=1,
        refusals=["POST /v1/responses 400"],
    )
    assert problems(bad, "scripted") == [
        "reward 0.0, not 1.0",
        "row not ok",
        "3 agent roots, not 1",
        "2 retokenization splits",
        "stored ids differ from the engine's",
        "1 proxy 4xx: POST /v1/responses 400",
    ]


def test_model_level_accepts_a_failed_task_but_not_infrastructure() -> None:
    weak = row(reward=0.0, row_ok=False, error_type="agent_error", error="the agent gave up")
    assert problems(weak, "model") == []
    assert problems(weak, "scripted")[0] == "agent_error: the agent gave up"
    broken = row(turns=0, error_type="engine_error", error="all 3 model calls failed")
    assert problems(broken, "model") == [
        "engine_error: all 3 model calls failed",
        "no captured turn",
    ]


def test_model_level_holds_the_capture_to_what_the_table_shows() -> None:
    bad = row(
        reward=0.0,
        row_ok=False,
        agent_roots=4,
        splits=1,
        exact_ids=False,
        proxy_4xx=1,
        refusals=["POST /v1/responses 400"],
    )
    assert problems(bad, "model") == [
        "4 agent roots, not 1",
        "1 retokenization splits",
        "stored ids differ from the engine's",
        "1 proxy 4xx: POST /v1/responses 400",
    ]


def test_only_an_agent_that_rewrites_its_history_may_have_several_roots() -> None:
    assert "mini-swe-agent" in REWRITES_HISTORY
    rewriter = row(agent="mini-swe-agent", dialect="chat", agent_roots=2)
    assert problems(rewriter, "model") == []
    assert problems(rewriter, "scripted") == ["2 agent roots, not 1"]
    # Its splits still count, and an agent root it must still have.
    assert problems(row(agent="mini-swe-agent", agent_roots=2, splits=1), "model") == [
        "1 retokenization splits"
    ]
    assert problems(row(agent="mini-swe-agent", agent_roots=0), "model") == ["0 agent roots, not 1"]


def test_an_agent_that_rewrites_under_the_scripted_model_may_have_several_roots_there() -> None:
    assert REWRITES_HISTORY["aider"].levels == {"scripted", "model"}
    for level in ("scripted", "model"):
        assert problems(row(agent="aider", dialect="chat", agent_roots=2), level) == []
        # Still no split, and a root it must have.
        assert problems(row(agent="aider", agent_roots=2, splits=1), level) == [
            "1 retokenization splits"
        ]
        assert problems(row(agent="aider", agent_roots=0), level) == ["0 agent roots, not 1"]
        # An agent not in the mapping: two roots fail it at either level.
        assert "codex" not in REWRITES_HISTORY
        assert problems(row(agent="codex", agent_roots=2), level) == ["2 agent roots, not 1"]


def test_markdown_says_how_an_agent_with_several_roots_rewrites_its_history() -> None:
    report = QualifyReport(
        level="scripted",
        engine="scripted",
        harbor_ray="0.1.0",
        harbor="0.25.0",
        started_at="2026-01-01T00:00:00+00:00",
        rows=[row(agent="aider", agent_roots=2, qualified=True), row(qualified=True)],
    )
    text = render_markdown(report)
    assert (
        "| aider | openai-responses | 0.171.0 | responses | yes | hello-file | yes | 2 | "
        "2 | 0 |" in text
    )
    assert f"- aider: {REWRITES_HISTORY['aider'].how}" in text
    assert "- codex:" not in text


def test_markdown_has_a_row_per_agent_and_profile_and_says_why_one_failed() -> None:
    failed = row(
        agent="gemini-cli", profile="google", reward=None, qualified=False, why=["no captured turn"]
    )
    report = QualifyReport(
        level="scripted",
        engine="scripted",
        harbor_ray="0.1.0",
        harbor="0.25.0",
        started_at="2026-01-01T00:00:00+00:00",
        rows=[
            row(qualified=True),
            row(task="count-words", qualified=True),
            row(profile="anthropic", qualified=True),
            failed,
        ],
    )
    text = render_markdown(report)
    assert (
        "| codex | openai-responses | 0.171.0 | responses | yes | hello-file | yes | 2 | "
        "1 | 0 | 1 | 1 | 0 | yes |" in text
    )
    assert "| codex | anthropic |" in text
    assert "| gemini-cli | google |" in text
    assert "- gemini-cli (google) on hello-file: no captured turn" in text
    assert "3 of 4 rows qualified; 2 of 3 (agent, profile) cells on every task." in text
    assert not report.qualified
    assert QualifyReport.model_validate_json(report.model_dump_json()) == report


def test_the_report_lists_every_unqualified_harness_with_its_reason_and_counts() -> None:
    report = QualifyReport(
        level="scripted",
        engine="scripted",
        harbor_ray="0.1.0",
        harbor="0.25.0",
        started_at="2026-12-03T12:00:00+00:00",
        rows=[row(), row(agent="pi", qualified=False, why=["no captured turn"])],
        harnesses=[
            HarnessRow(name="codex", qualified=True, reason="", level_2=True),
            HarnessRow(name="pi", qualified=True, reason=""),
            HarnessRow(name="aider", qualified=False, reason="runs no command"),
        ],
    )
    text = render_markdown(report)
    assert (
        "Harnesses: Harbor 0.25.0 knows 3; qualified at level 1 (scripted): 2, at "
        "level 2 (model): 1."
    ) in text
    assert text.endswith("Not qualified:\n\n- aider: runs no command\n")
    again = QualifyReport.model_validate_json(report.model_dump_json())
    assert render_markdown(again) == text


def test_the_report_says_why_a_qualified_harness_is_not_at_level_2() -> None:
    report = QualifyReport(
        level="model",
        engine="m",
        harbor_ray="0.1.0",
        harbor="0.25.0",
        started_at="2026-12-03T12:00:00+00:00",
        rows=[row()],
        harnesses=[
            HarnessRow(name="codex", qualified=True, reason="", level_2=True),
            HarnessRow(
                name="vibe",
                qualified=True,
                reason="",
                level_2_reason="its first request is too long",
            ),
        ],
    )
    assert render_markdown(report).endswith(
        "Qualified at level 1, not at level 2:\n\n- vibe: its first request is too long\n"
    )


def test_a_v1_report_without_harnesses_renders_without_the_section() -> None:
    old = QualifyReport.model_validate(
        {
            "report_version": 1,
            "level": "scripted",
            "engine": "scripted",
            "harbor_ray": "0.1.0",
            "harbor": "0.25.0",
            "started_at": "t",
            "rows": [],
        }
    )
    assert "Harnesses" not in render_markdown(old)
