"""`harbor_ray.jobs.qualification`: what a qualification request refuses before anything
starts, and its level."""

from pathlib import Path

import pytest

from harbor_ray.errors import DatasetError, StartError, UnknownAgentError
from harbor_ray.jobs.qualification import QualifyRequest, run_qualify


@pytest.mark.parametrize(("changes", "error", "says"), [
    ({"llm_url": "http://127.0.0.1:1", "engine": "e.yaml"}, StartError, "not both"),
    ({"agents": ("no-such-agent",)}, UnknownAgentError, "no-such-agent"),
    ({"agents": ("oracle",), "tasks": ("no-such-task",)}, DatasetError, "no-such-task"),
])
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
