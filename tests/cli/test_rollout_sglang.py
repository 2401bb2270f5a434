"""`harbor-ray rollout` against an SGLang server (its stand-in, tests/fixtures): the
engine is found from its answers, certified as SGLang, and every turn's ids are the
engine's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.sglang_engine import SglangStandIn, sglang_app
from tests.fixtures.threaded import serve_in_thread
from tests.trials.scripts import terminus_script


@pytest.mark.integration  # a real terminus-2 trial in a sandbox: about 10 s
@pytest.mark.parametrize("flags", [(), ("--engine-kind", "sglang")])
def test_a_rollout_against_sglang_keeps_its_exact_ids(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    stand_in = SglangStandIn(
        script=terminus_script("echo hello > /app/hello.txt\n"), return_token_ids=False
    )
    with serve_in_thread(sglang_app(stand_in)) as url:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "harbor_ray.cli",
                "rollout",
                "--agent",
                "terminus-2",
                "--task",
                "hello-file",
                "--llm-url",
                url,
                "--out",
                str(tmp_path),
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "engine.json").read_text())["engine_kind"] == "sglang"
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["ok"] and row["reward"] == 1.0
    turns = row["capture"]["turns"]
    assert turns
    # The ids the stand-in's own tokenizer made for the agent's calls (the last ones).
    assert [(t["prompt_ids"], t["token_ids"]) for t in turns] == list(
        zip(stand_in.prompts[-len(turns) :], stand_in.outputs[-len(turns) :], strict=True)
    )
