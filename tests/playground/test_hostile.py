"""The playground under hostile input (the fuzzing pass's doors): each is refused with
its status and words naming the field, starts nothing, and quotes nothing it should
not. Runs go through the stand-in for `run_rollouts` (tests/playground/served.py)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from harbor_ray.capture.proxy.certify import certify_url
from harbor_ray.cli import app as cli
from harbor_ray.errors import PlaygroundError
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.scrub import Scrub
from harbor_ray.playground.serve import open_playground
from harbor_ray.playground.visitor_engine import CERTIFY_TIMEOUT_S, VisitorEngines
from tests.fixtures.reached import refusal
from tests.fixtures.threaded import serve_in_thread
from tests.playground.served import FakeRollouts, client_of
from tests.playground.test_app import finished

FORM = {"agent": "oracle", "dataset": "samples", "task": "hello-file", "attempts": 1}


# --- D1. agents ----------------------------------------------------------------------


def test_an_agent_the_playground_does_not_offer_is_a_404_and_nothing_is_imported(
    catalog: Catalog, tmp_path: Path
) -> None:
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
    catalog: Catalog, tmp_path: Path
) -> None:
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
ODD_COUNTS = [
    "\u00b2",
    "\u0661",
    "9" * 4301,
    "9" * 10,
    "",
    "+1",
    " 1",
    "1_0",
    "0x1",
    "1e3",
    "1.0",
    "-0",
]


@pytest.mark.parametrize("after", ODD_COUNTS)
def test_an_odd_cursor_is_a_400_naming_it(catalog: Catalog, tmp_path: Path, after: str) -> None:
    with client_of(catalog, tmp_path) as client:
        run = client.post("/api/runs", json=FORM).json()
        reply = client.get("/api/calls", params={"id": run["id"], "after": after})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"].startswith("after: "), reply.text
        assert (
            client.get("/api/calls", params={"id": run["id"], "after": "999999999"}).json()["calls"]
            == []
        )


# --- D6. credentials in URLs -----------------------------------------------------------


@pytest.mark.parametrize(
    "user, password",
    [
        ("admin", "pw"),
        ("a", "b"),
        ("", "p"),
        ("u", ""),
        ("trainer", "s3cret-token-long"),
        ("x" * 300, "y" * 300),
    ],
)
def test_credentials_are_scrubbed_from_every_url_shown_whatever_their_length(
    user: str, password: str
) -> None:
    engine = f"http://{user}:{password}@10.1.2.3:9/v1"
    visitor = f"https://{user}:{password}@visitor.example/v1"
    scrub = Scrub(key=None, llm_url=engine)
    shown = scrub(
        orjson.dumps(
            {
                "url": engine,
                "error": f"cannot list models at {engine}/models: engine "
                f"unreachable at {engine[:-3]}: cannot connect to 10.1.2.3:9: [Errno 111] "
                "Connect call failed ('10.1.2.3', 9)",
                "run": f"RuntimeError: {visitor}/chat/completions answered 401 (see {visitor})",
                "file": "mail me at someone@example.com; 10.1.2.30 is not the engine",
            }
        )
    )
    text = shown.decode()
    assert "10.1.2.3:9" not in text and "('10.1.2.3', 9)" not in text, text
    assert f"//{user}:" not in text and f":{password}@" not in text, text
    # A visitor's own URL keeps its host; only its credentials go.
    assert text.count("https://[hidden]@visitor.example/v1") == 2, text
    assert "someone@example.com" in text and "10.1.2.30 is not" in text


def test_no_answer_shows_a_short_engine_password_or_the_engine_s_host(
    catalog: Catalog, tmp_path: Path
) -> None:
    engine = "http://admin:pw@127.0.0.1:9/v1"
    failing = FakeRollouts(
        fail=RuntimeError(
            "engine unreachable at http://admin:pw@127.0.0.1:9: cannot connect to "
            "127.0.0.1:9: [Errno 111] Connect call failed ('127.0.0.1', 9)"
        )
    )
    with client_of(catalog, tmp_path, rollouts=failing, engine=engine) as client:
        run = client.post("/api/runs", json=FORM).json()
        error = finished(client, run["id"])["error"]
        setup = client.get("/api/setup").text
    for text in (error, setup):
        assert ":pw@" not in text and "admin" not in text, text
        assert "127.0.0.1:9" not in text and "('127.0.0.1', 9)" not in text, text
    assert error.startswith("RuntimeError: engine unreachable at [hidden]"), error


# --- D2. a visitor's engine URL ------------------------------------------------------

TOKEN = "tok-0f1e2d3c4b5a-of-another-service"


@pytest.fixture
def other_service() -> Iterator[tuple[str, list[str]]]:
    """A loopback service that is no engine: it answers 403 with a token in its body to
    anything; (its URL, the paths it was asked)."""
    asked: list[str] = []

    async def anything(request: Request) -> JSONResponse:
        asked.append(request.url.path)
        return JSONResponse({"error": {"message": f"forbidden: {TOKEN}"}}, 403)

    app = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST"])])
    with serve_in_thread(app) as url:
        yield url, asked


@contextmanager
def silent_listener() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def visitor_form(url: str) -> dict[str, Any]:
    return {**FORM, "engine": "visitor", "llm_url": url}


PRIVATE_FORMS = [
    "http://127.0.0.1:{port}",
    "http://localhost:{port}/v1",
    "http://0.0.0.0:{port}",
    "http://2130706433:{port}",
    "http://127.1:{port}",
    "http://[::1]:{port}",
    "http://[::ffff:127.0.0.1]:{port}",
    "http://10.1.2.3:8000",
    "http://192.168.0.1",
    "http://100.64.0.1",
    "http://169.254.169.254/latest",
    "http://[fd00::1]:8000",
]


def test_a_visitor_engine_on_a_loopback_or_private_address_is_refused_unreached(
    catalog: Catalog, tmp_path: Path, other_service: tuple[str, list[str]]
) -> None:
    url, asked = other_service
    port = urlsplit(url).port
    rollouts = FakeRollouts()
    with client_of(
        catalog,
        tmp_path,
        rollouts=rollouts,
        engines=VisitorEngines(),
        engine="http://127.0.0.1:9/v1",
    ) as client:
        for form in PRIVATE_FORMS:
            reply = client.post("/api/runs", json=visitor_form(form.format(port=port)))
            error = reply.json()["error"]
            assert reply.status_code == 400, (form, reply.text)
            assert error.startswith("llm_url: ") and "--allow-private-engines" in error
        assert rollouts.requests == []
        # The server's own engine is the operator's: on loopback, it is used.
        assert client.post("/api/runs", json=FORM).status_code == 200
    assert asked == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com",
        "example.com:8000",
        "http://",
        "http://example.com:99999",
        "http:///v1",
        "file:///etc",
    ],
)
def test_a_visitor_engine_url_that_is_no_http_url_is_a_400(
    catalog: Catalog, tmp_path: Path, url: str
) -> None:
    with client_of(
        catalog, tmp_path, engines=VisitorEngines(allow_private=True, certify=certify_url)
    ) as client:
        reply = client.post("/api/runs", json=visitor_form(url))
    # Its own words: the certification that follows refuses such a URL too, in others.
    refusal(reply, 400, "llm_url: an http:// or https:// URL")


def test_a_visitor_engine_that_fails_is_answered_in_fixed_words(
    catalog: Catalog, tmp_path: Path, other_service: tuple[str, list[str]]
) -> None:
    url, asked = other_service
    engines = VisitorEngines(allow_private=True, certify=certify_url)
    with client_of(catalog, tmp_path, engines=engines) as client:
        replies = [
            client.post("/api/runs", json=visitor_form(target), timeout=30)
            for target in (url, f"{url}/v1", closed_port())
        ]
    for reply in replies:
        assert reply.status_code == 400, reply.text
        assert TOKEN not in reply.text and "403" not in reply.text, reply.text
    # A service that answers reads as a closed port: the form is no port scanner.
    assert len({reply.json()["error"] for reply in replies}) == 1, replies[0].text
    assert replies[0].json()["error"].startswith("llm_url: that engine cannot be used")
    assert asked  # the operator allowed loopback: it was asked, and nothing it said shown


def test_a_visitor_engine_that_never_answers_is_given_up_on_in_time(
    catalog: Catalog, tmp_path: Path
) -> None:
    engines = VisitorEngines(allow_private=True, certify=certify_url, timeout_s=1)
    with silent_listener() as url, client_of(catalog, tmp_path, engines=engines) as client:
        started = time.monotonic()
        reply = client.post("/api/runs", json=visitor_form(url), timeout=30)
        took = time.monotonic() - started
    assert reply.status_code == 400 and took < 10, (took, reply.text)
    assert reply.json()["error"] == "llm_url: that engine did not answer within 1 s"
    assert 10 <= CERTIFY_TIMEOUT_S <= 20  # the bound docs/playground.md states


# --- D3. the queue -----------------------------------------------------------------------


def test_runs_past_the_queue_cap_are_a_429_naming_the_flag(
    catalog: Catalog, tmp_path: Path
) -> None:
    rollouts = FakeRollouts()
    rollouts.release.clear()  # the first run holds its one slot
    with client_of(catalog, tmp_path, rollouts=rollouts, max_runs=1, max_queued=2) as client:
        first = client.post("/api/runs", json=FORM).json()
        while client.get("/api/run", params={"id": first["id"]}).json()["status"] != "running":
            time.sleep(0.02)
        replies = [client.post("/api/runs", json=FORM) for _ in range(4)]
        assert [r.status_code for r in replies] == [200, 200, 429, 429], replies[-1].text
        assert "--max-queued" in replies[-1].json()["error"]
        assert len(client.get("/api/runs").json()["runs"]) == 3
        rollouts.release.set()  # the queue drains: room again
        for run in client.get("/api/runs").json()["runs"]:
            finished(client, run["id"])
        assert client.post("/api/runs", json=FORM).status_code == 200


def test_with_no_queue_a_free_slot_still_runs_a_form(catalog: Catalog, tmp_path: Path) -> None:
    rollouts = FakeRollouts()
    rollouts.release.clear()
    with client_of(catalog, tmp_path, rollouts=rollouts, max_runs=1, max_queued=0) as client:
        assert client.post("/api/runs", json=FORM).status_code == 200
        refused = client.post("/api/runs", json=FORM)
        assert refused.status_code == 429 and "0 runs are waiting" in refused.text
        rollouts.release.set()


def test_the_queue_and_engine_flags_are_in_help_with_the_launcher_s_defaults() -> None:
    from harbor_ray.cli import playground as command
    from harbor_ray.playground import launch

    assert (command.MAX_RUNS, command.MAX_QUEUED) == (launch.MAX_RUNS, launch.MAX_QUEUED)
    result = CliRunner().invoke(cli, ["playground", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--max-queued" in result.output and "--allow-private-engines" in result.output
