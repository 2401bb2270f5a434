"""`harbor_ray.jobs.qualification`: what a qualification request refuses before anything
starts, and its level."""

from pathlib import Path

import pytest

from harbor_ray.errors import (
    DatasetError,
    ProfileNotSupportedError,
    StartError,
    UnknownAgentError,
)
from harbor_ray.jobs.qualification import QualifyRequest, plan_qualify, run_qualify


@pytest.mark.parametrize(
    ("changes", "error", "says"),
    [
        ({"llm_url": "http://127.0.0.1:1", "engine": "e.yaml"}, StartError, "not both"),
        ({"agents": ("no-such-agent",)}, UnknownAgentError, "no-such-agent"),
        ({"agents": ("oracle",), "tasks": ("no-such-task",)}, DatasetError, "no-such-task"),
        (
            {"agents": ("opencode", "codex"), "profiles": ("anthropic",)},
            ProfileNotSupportedError,
            "'codex' is not wired to speak profile 'anthropic'; its profiles: openai-responses",
        ),
    ],
)
def test_a_request_that_cannot_work_is_refused_before_anything_starts(
    tmp_path: Path, changes: dict, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        run_qualify(QualifyRequest(**{"out": tmp_path, **changes}))
    assert list(tmp_path.iterdir()) == []


def test_the_level_follows_the_engine() -> None:
    assert QualifyRequest().level == "scripted"
    assert QualifyRequest(llm_url="http://127.0.0.1:1").level == "model"
    assert QualifyRequest(engine="serve_configs/engine_cpu.yaml").level == "model"


@pytest.mark.parametrize(
    ("profiles", "cells"),
    [
        ((), [("codex", "openai-responses"), ("opencode", "openai-chat"), ("oracle", None)]),
        (
            ("all",),
            [
                ("codex", "openai-responses"),
                ("opencode", "openai-chat"),
                ("opencode", "anthropic"),
                ("opencode", "google"),
                ("opencode", "openai-responses"),
                ("oracle", None),
            ],
        ),
    ],
)
def test_the_plan_has_a_cell_per_agent_and_profile_asked(
    tmp_path: Path, profiles: tuple[str, ...], cells: list[tuple[str, str | None]]
) -> None:
    request = QualifyRequest(
        agents=("codex", "opencode", "oracle"), profiles=profiles, out=tmp_path
    )
    assert list(plan_qualify(request).cells) == cells


def test_named_profiles_keep_the_agents_own_order(tmp_path: Path) -> None:
    request = QualifyRequest(agents=("pi",), profiles=("google", "openai-chat"), out=tmp_path)
    assert list(plan_qualify(request).cells) == [("pi", "openai-chat"), ("pi", "google")]
