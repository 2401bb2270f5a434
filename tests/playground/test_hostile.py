"""The playground under hostile input (the fuzzing pass's doors): each is refused with
its status and words naming the field, starts nothing, and quotes nothing it should
not. Runs go through the stand-in for `run_rollouts` (tests/playground/served.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from harbor_ray.errors import PlaygroundError
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.scrub import Scrub
from harbor_ray.playground.serve import open_playground
from tests.playground.served import FakeRollouts, client_of
from tests.playground.test_app import finished

FORM = {"agent": "oracle", "dataset": "samples", "task": "hello-file", "attempts": 1}


# --- D1. agents ----------------------------------------------------------------------


def test_an_agent_the_playground_does_not_offer_is_a_404_and_nothing_is_imported(
        catalog: Catalog, tmp_path: Path) -> None:
    sys.modules.pop("this", None)
    rollouts = FakeRollouts()
    with client_of(catalog, tmp_path, rollouts=rollouts) as client:
        for agent in ("this:s", "os:system", "acp:anything", "no-such-agent"):
            reply = client.post("/api/runs", json={**FORM, "agent": agent})
            assert reply.status_code == 404, (agent, reply.text)
            assert f"unknown agent {agent!r}" in reply.json()["error"], reply.text
            assert "--allow-agent" in reply.json()["error"]
        assert client.get("/api/runs").json()["runs"] == []
    assert "this" not in sys.modules and rollouts.requests == []


def test_an_import_path_allowed_at_start_is_run_and_no_other(
        catalog: Catalog, tmp_path: Path) -> None:
    allowed = "harbor_ray.online.controller:LocalRollouts"
    rollouts = FakeRollouts()
    with client_of(catalog, tmp_path, rollouts=rollouts, agents=(allowed,)) as client:
        assert client.post("/api/runs", json={**FORM, "agent": allowed}).status_code == 200
        refused = client.post("/api/runs", json={**FORM, "agent": "tests.online.local:KEY"})
        assert refused.status_code == 404 and "unknown agent" in refused.json()["error"]
    assert [r.agent for r in rollouts.requests] == [allowed]


def test_an_allowed_agent_that_is_no_import_path_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(PlaygroundError, match="unknown agent 'not a path'"):
        open_playground(["samples"], out=tmp_path, agents=("not a path",))


# --- D4. cursors ---------------------------------------------------------------------

# Superscript two and Arabic-Indic one pass str.isdigit (int() refuses the first, reads
# the second as 1); 4,301 digits are past int()'s limit on a string; the others are
# forms int() or float() take.
ODD_COUNTS = ["\u00b2", "\u0661", "9" * 4301, "9" * 10, "", "+1", " 1", "1_0", "0x1",
              "1e3", "1.0", "-0"]


@pytest.mark.parametrize("after", ODD_COUNTS)
def test_an_odd_cursor_is_a_400_naming_it(catalog: Catalog, tmp_path: Path,
                                          after: str) -> None:
    with client_of(catalog, tmp_path) as client:
        run = client.post("/api/runs", json=FORM).json()
        reply = client.get("/api/calls", params={"id": run["id"], "after": after})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"].startswith("after: "), reply.text
        assert client.get("/api/calls", params={"id": run["id"], "after": "999999999"}
                          ).json()["calls"] == []


# --- D6. credentials in URLs -----------------------------------------------------------


@pytest.mark.parametrize("user, password", [
    ("admin", "pw"), ("a", "b"), ("", "p"), ("u", ""), ("trainer", "s3cret-token-long"),
    ("x" * 300, "y" * 300)])
def test_credentials_are_scrubbed_from_every_url_shown_whatever_their_length(
        user: str, password: str) -> None:
    engine = f"http://{user}:{password}@10.1.2.3:9/v1"
    visitor = f"https://{user}:{password}@visitor.example/v1"
    scrub = Scrub(key=None, llm_url=engine)
    shown = scrub(orjson.dumps({
        "url": engine, "error": f"cannot list models at {engine}/models: engine "
        f"unreachable at {engine[:-3]}: cannot connect to 10.1.2.3:9: [Errno 111] "
        "Connect call failed ('10.1.2.3', 9)",
        "run": f"RuntimeError: {visitor}/chat/completions answered 401 (see {visitor})",
        "file": "mail me at someone@example.com; 10.1.2.30 is not the engine"}))
    text = shown.decode()
    assert "10.1.2.3:9" not in text and "('10.1.2.3', 9)" not in text, text
    assert f"//{user}:" not in text and f":{password}@" not in text, text
    # A visitor's own URL keeps its host; only its credentials go.
    assert text.count("https://[hidden]@visitor.example/v1") == 2, text
    assert "someone@example.com" in text and "10.1.2.30 is not" in text


def test_no_answer_shows_a_short_engine_password_or_the_engine_s_host(
        catalog: Catalog, tmp_path: Path) -> None:
    engine = "http://admin:pw@127.0.0.1:9/v1"
    failing = FakeRollouts(fail=RuntimeError(
        "engine unreachable at http://admin:pw@127.0.0.1:9: cannot connect to "
        "127.0.0.1:9: [Errno 111] Connect call failed ('127.0.0.1', 9)"))
    with client_of(catalog, tmp_path, rollouts=failing, engine=engine) as client:
        run = client.post("/api/runs", json=FORM).json()
        error = finished(client, run["id"])["error"]
        setup = client.get("/api/setup").text
    for text in (error, setup):
        assert ":pw@" not in text and "admin" not in text, text
        assert "127.0.0.1:9" not in text and "('127.0.0.1', 9)" not in text, text
    assert error.startswith("RuntimeError: engine unreachable at [hidden]"), error
