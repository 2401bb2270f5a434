"""`harbor-ray rollout --capture`: an engine that returns no token ids is refused for
training, naming the evaluation mode, and evaluated when the run asks for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from tests.fixtures.threaded import fake_engine_in_thread
from tests.trials.scripts import terminus_script


def text_engine() -> FakeEngine:
    """A hosted OpenAI-compatible API: no ids, no logprobs, 400 on `return_token_ids`."""
    return FakeEngine(
        script=terminus_script("echo hello > /app/hello.txt\n"),
        token_ids=False,
        logprobs=False,
        refuses_unknown_fields=True,
    )


def rollout(url: str, out: Path, *flags: str) -> tuple[int, str]:
    """The command as users run it (its own process; the engine is this one's)."""
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
            str(out),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.parametrize("flags", [(), ("--capture", "tokens"), ("--capture", "logprobs")])
def test_refuses_an_engine_below_the_level_asked_naming_the_mode(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    with fake_engine_in_thread(text_engine()) as (engine, url):
        code, output = rollout(url, tmp_path, *flags)
    assert code == 2, output
    assert "--capture text" in output
    assert not any(
        call.get("messages") != [{"role": "user", "content": "Say OK."}] for call in engine.calls
    ), "no rollout may start"


@pytest.mark.integration  # a real terminus-2 trial in a sandbox: about 10 s
def test_text_capture_evaluates_an_engine_without_ids(tmp_path: Path) -> None:
    with fake_engine_in_thread(text_engine()) as (engine, url):
        code, output = rollout(url, tmp_path, "--capture", "text")
    assert code == 0, output
    assert "not trainable" in output or "no row is trainable" in output
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["ok"] and row["reward"] == 1.0 and row["capture_level"] == "text"
    capture = row["capture"]
    assert capture["trainable"] is False and capture["sequences"] == []
    turns = capture["turns"]
    assert turns and all(
        t["prompt_ids"] is None
        and t["token_ids"] is None
        and t["logprobs"] is None
        and t["capture_level"] == "text"
        for t in turns
    )
    assert turns[0]["request_messages"] and turns[0]["response_message"]["content"]
    assert all(t["usage"]["completion_tokens"] > 0 for t in turns)
    # Nothing asked the engine for what the level does not record, nor stitched.
    assert not any(
        "return_token_ids" in call or "kv_transfer_params" in call
        for call in engine.calls[-len(turns) :]
    )
