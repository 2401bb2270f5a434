"""`harbor-ray rollout --upstream`: a hosted API, evaluated in its own format with a key
that reaches it and nothing else; refused for training. Against stand-ins of the
providers' APIs (tests/fixtures/providers.py): no real provider is called."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.cli import app
from tests.cli.test_rollout_capture import rollout
from tests.fixtures.providers import MODEL, StandIn, provider_app
from tests.fixtures.threaded import serve_in_thread
from tests.trials.scripts import terminus_script

SECRET = "sk-ant-upstream-SECRET-51c2e8"


@pytest.mark.parametrize("command", ["rollout", "proxy", "sweep"])
def test_help_shows_the_upstream_flags_and_the_default(command: str) -> None:
    shown = " ".join(
        CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert "--upstream" in shown and "openai-chat" in shown and "[default: openai-chat]" in shown
    for profile in ("openai-responses", "anthropic", "google", "hf"):
        assert profile in shown
    assert "--upstream-key-file" in shown


def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "upstream.key"
    path.write_text(SECRET + "\n")
    return path


def test_training_refuses_a_hosted_upstream_naming_the_eval_mode(tmp_path: Path) -> None:
    stand_in = StandIn("anthropic", SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        code, output = rollout(
            url,
            tmp_path / "out",
            "--upstream",
            "anthropic",
            "--upstream-key-file",
            str(key_file(tmp_path)),
        )
    assert code == 2, output
    assert "--capture text" in output and SECRET not in output
    assert all(
        body is None or body["messages"][-1]["content"] == [{"type": "text", "text": "Say OK."}]
        for _, _, body in stand_in.requests
    ), "only certification's probes: no rollout may start"


def test_an_unreadable_key_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    code, output = rollout(
        "http://127.0.0.1:9",
        tmp_path / "out",
        "--upstream",
        "anthropic",
        "--capture",
        "text",
        "--upstream-key-file",
        str(tmp_path / "missing.key"),
    )
    assert code == 2, output
    assert "--upstream-key-file" in output


# Where each profile's generations go (the stand-in's route), for the check below.
GENERATES = {
    "openai-chat": "/v1/chat/completions",
    "hf": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "google": f"/v1/models/{MODEL}:generateContent",
}


@pytest.mark.integration  # a real terminus-2 trial in a sandbox: about 10 s each
@pytest.mark.parametrize("profile", sorted(GENERATES))
def test_a_text_rollout_against_each_profile_keeps_the_key_out_of_everything(
    tmp_path: Path, profile: UpstreamName
) -> None:
    """terminus-2 (LiteLLM's OpenAI chat) through the proxy to each provider-shaped API:
    converted to its format, rewarded, its conversation kept, never trainable; the
    upstream key is sent in the API's own header and is in no file the run wrote nor in
    its output."""
    stand_in = StandIn(profile, SECRET, terminus_script("echo hello > /app/hello.txt\n"))
    out = tmp_path / "out"
    with serve_in_thread(provider_app(stand_in)) as url:
        code, output = rollout(
            url,
            out,
            "--upstream",
            profile,
            "--capture",
            "text",
            "--upstream-key-file",
            str(key_file(tmp_path)),
        )
    assert code == 0, output
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["ok"] and row["reward"] == 1.0 and row["capture_level"] == "text"
    turns = row["capture"]["turns"]
    assert turns and turns[0]["request_messages"] and turns[0]["response_message"]["content"]
    assert row["capture"]["trainable"] is False
    generated = [path for path, _, body in stand_in.requests if body is not None]
    assert generated.count(GENERATES[profile]) >= len(turns), generated
    assert SECRET not in output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written
    leaked = [p for p in written if SECRET.encode() in p.read_bytes()]
    assert leaked == [], f"the upstream key was written to {leaked}"
