"""Property and load tests of the controller's routes and MCP tools, like the capture
proxy's (tests/capture/test_fuzz.py): whatever a valid request is mutated into, the
answer is never a 5xx; a refusal is a JSON error naming what is wrong and accepts
nothing; a tool call ends as a result or a tool error, never an internal one; no ERROR
is logged. And a burst of submits, polls and cancels at once is answered whole.

The controller runs in this process on `LocalRollouts` (no Ray), served over loopback;
bounded in examples, derandomized so that CI runs the same examples every time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harbor_ray.online.controller import Controller
from tests.capture.test_fuzz import FUZZ, VALUES, mutated
from tests.online.conftest import KEY
from tests.online.local import LocalRollouts, local_controller, served

SUBMIT = {
    "request_id": "r",
    "tasks": [{"task": "hello-file", "n": 2}],
    "agent": "terminus-2",
    "dataset": "samples",
    "sandbox": "local",
    "budget": 4,
    "deadline_s": 30.0,
    "max_staleness": 1,
    "sampling": {"temperature": 0.7},
    "metadata": {"step": 1, "tags": ["a"]},
}
TOOLS = {
    "run_rollout": {
        "task": "hello-file",
        "agent": "terminus-2",
        "dataset": "samples",
        "sandbox": "local",
        "budget": 2,
        "deadline_s": 10.0,
    },
    "list_tasks": {"dataset": "samples"},
}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
# Strings that once broke a route: the home of no user, a name past NAME_MAX, empty, a
# module's import path, a JSON file's "registry", a path outside the data.
HOSTILE = st.sampled_from(
    [
        "~nosuchuser",
        "~nosuchuser/x:y",
        "/" + "a" * 300,
        "/" + "a" * 5000,
        "",
        "this:s",
        "os:system",
        "/etc/passwd:x",
        "/etc",
        "samples/./.",
        "../../..",
        "\x00",
    ]
)


@st.composite
def hostile_field(draw: st.DrawFn, body: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """`body` with one of `fields` set to a hostile string."""
    return {**body, draw(st.sampled_from(fields)): draw(HOSTILE)}


class Service:
    def __init__(self, controller: Controller, http: httpx.Client) -> None:
        self.controller, self.http = controller, http
        self.ids = iter(range(10**9))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    controller = local_controller(
        tmp_path_factory.mktemp("fuzz"), capacity=64, runner=LocalRollouts(hold_s=0.0)
    )
    with served(controller) as http:
        yield Service(controller, http)


class ErrorsLogged(logging.Handler):
    """ERROR records logged anywhere in this process (the server's thread included)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


_ERRORS = ErrorsLogged()


def logged_errors() -> list[str]:
    seen, _ERRORS.messages = _ERRORS.messages, []
    return seen


@pytest.fixture(autouse=True)
def no_errors_logged() -> Iterator[None]:
    logging.getLogger().addHandler(_ERRORS)
    logged_errors()
    try:
        yield
    finally:
        logging.getLogger().removeHandler(_ERRORS)
    assert logged_errors() == []


def refusal_named(reply: httpx.Response) -> None:
    """A refusal by the route's own checks: it names the field, or the body's model as a
    whole ("body: ", where the field has no name); a door before them (a body not read
    as JSON, a key, a Host) names neither."""
    body = reply.json()
    assert isinstance(body["error"], str) and body["error"], body
    # Two doors name no field: over capacity (429, the controller's), and a body nested
    # past what the JSON reader reads (1024 levels: a deep value mutated deeper again).
    if reply.status_code != 429 and "depth limit exceeded" not in body["error"]:
        assert body.get("field") or body["error"].startswith("body: "), body


@FUZZ
@given(body=mutated(SUBMIT) | hostile_field(SUBMIT, ["dataset", "sandbox", "agent"]))
@example(body=SUBMIT)  # the valid one is accepted: the mutants reach the same checks
def test_submit(service: Service, body: dict[str, Any]) -> None:
    valid = body == SUBMIT
    if isinstance(body.get("request_id"), str):
        body = {**body, "request_id": f"{body['request_id']}-{next(service.ids)}"}
    known = len(service.controller.book.requests)
    reply = service.http.post("/v1/rollouts", json=body)
    assert reply.status_code in (202, 400, 404, 429), (reply.status_code, reply.text)
    if reply.status_code != 202:
        assert not valid, reply.text
        refusal_named(reply)
        assert len(service.controller.book.requests) == known  # nothing accepted
    else:
        assert len(service.controller.book.requests) == known + 1
    # Whatever was accepted, the groups are still delivered.
    polled = service.http.get("/v1/groups", params={"max": 1000})
    assert polled.status_code == 200, polled.text
    ids = [g["group_id"] for g in polled.json()["groups"]]
    if ids:
        service.http.post("/v1/groups/ack", json={"group_ids": ids})


ACK = {"group_ids": ["a", "b"]}


@FUZZ
@given(body=mutated(ACK))
@example(body=ACK)
def test_ack(service: Service, body: dict[str, Any]) -> None:
    reply = service.http.post("/v1/groups/ack", json=body)
    assert reply.status_code in (200, 400), (reply.status_code, reply.text)
    if reply.status_code == 400:
        refusal_named(reply)
    else:  # the controller's answer: which of the ids it knew
        answer = reply.json()
        assert {*answer["acknowledged"], *answer["unknown"]} == set(body["group_ids"])
    if body == ACK:
        assert reply.json() == {"acknowledged": [], "unknown": ["a", "b"]}, reply.text


WEIGHTS = {"path": "/ckpt/1", "version": 10**6}


@FUZZ
@given(body=mutated(WEIGHTS))
@example(body=WEIGHTS)
def test_weights(service: Service, body: dict[str, Any]) -> None:
    reply = service.http.post("/v1/weights", json=body)
    assert reply.status_code in (200, 400, 409), (reply.status_code, reply.text)
    if reply.status_code != 200:
        refusal_named(reply)
    if body == WEIGHTS:  # taken, or (asked again) refused by the controller as not newer
        assert reply.status_code in (200, 409) and "version" in reply.text, reply.text


@FUZZ
@given(
    group_id=st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#%"),
        min_size=1,
        max_size=80,
    ),
    query=st.dictionaries(st.sampled_from(["max", "wait_s", "x"]), st.text(max_size=8), max_size=3),
)
def test_cancel_and_poll(service: Service, group_id: str, query: dict[str, str]) -> None:
    cancel = service.http.post(f"/v1/groups/{group_id}/cancel")
    assert cancel.status_code in (200, 404), (cancel.status_code, cancel.text)
    if cancel.status_code == 404:  # the controller's: no such group
        assert cancel.json()["field"] == "group_id", cancel.text
    if query.get("wait_s"):
        query["wait_s"] = "0"  # a poll here never waits
    polled = service.http.get("/v1/groups", params=query)
    assert polled.status_code in (200, 400), (polled.status_code, polled.text)
    if polled.status_code == 400:
        assert polled.json()["field"] in query, polled.text
    else:
        assert isinstance(polled.json()["groups"], list), polled.text


def _tool_call(tool: str) -> st.SearchStrategy[tuple[str, Any]]:
    arguments = mutated(TOOLS[tool]) | VALUES | hostile_field(TOOLS[tool], sorted(TOOLS[tool]))
    return st.tuples(st.just(tool), arguments)


@FUZZ
@given(call=st.sampled_from(sorted(TOOLS)).flatmap(_tool_call))
@example(call=("list_tasks", {"dataset": "~nosuchuser"}))
@example(call=("list_tasks", TOOLS["list_tasks"]))
@example(call=("run_rollout", TOOLS["run_rollout"]))
@example(call=("run_rollout", {**TOOLS["run_rollout"], "dataset": "/" + "a" * 5000}))
def test_mcp_tools(service: Service, call: tuple[str, Any]) -> None:
    tool, arguments = call
    reply = service.http.post(
        "/mcp",
        headers=MCP_HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        },
    )
    assert reply.status_code in (200, 400), (reply.status_code, reply.text)
    answer = reply.json()
    if "error" in answer:  # refused by the protocol: its own code, not an internal one
        assert answer["error"]["code"] != -32603, answer
        return
    if answer["result"].get("isError"):
        text = answer["result"]["content"][0]["text"]
        assert "unexpected" not in text and "Traceback" not in text, text
    # The valid calls are run: the mutants reach the tools, not some door before them.
    assert arguments != TOOLS[tool] or not answer["result"].get("isError"), answer
    assert logged_errors() == []


def test_a_burst_of_submits_polls_and_cancels_is_answered_whole(tmp_path: Path) -> None:
    # Held longer than the bursts take: past the capacity, 429s.
    controller = local_controller(tmp_path, capacity=150, runner=LocalRollouts(hold_s=10))
    with served(controller) as http:
        url = str(http.base_url)

        async def bursts() -> tuple[list[httpx.Response], list[httpx.Response]]:
            async with httpx.AsyncClient(
                base_url=url, timeout=60, headers={"authorization": f"Bearer {KEY}"}
            ) as client:
                submits = await asyncio.gather(
                    *(
                        client.post("/v1/rollouts", json={**SUBMIT, "request_id": f"burst-{i}"})
                        for i in range(100)
                    )
                )
                accepted = [
                    r.json()["groups"][0]["group_id"] for r in submits if r.status_code == 202
                ]
                others = await asyncio.gather(
                    *(client.post(f"/v1/groups/{g}/cancel") for g in accepted[::2]),
                    *(client.get("/v1/groups", params={"max": 5}) for _ in range(50)),
                )
                return submits, others

        submits, others = asyncio.run(bursts())
        statuses = [r.status_code for r in submits]
        assert set(statuses) == {202, 429} and statuses.count(202) == 75  # 150 / 2
        assert {r.status_code for r in others} == {200}, [r.text for r in others]
        accepted, cancelled = 75, 38
        # Every group not cancelled is delivered, and only those.
        delivered: set[str] = set()
        while len(delivered) < accepted - cancelled:
            groups = http.get("/v1/groups", params={"max": 1000, "wait_s": 30}).json()
            assert groups["groups"], f"{len(delivered)} of {accepted - cancelled} delivered"
            ids = [g["group_id"] for g in groups["groups"]]
            http.post("/v1/groups/ack", json={"group_ids": ids})
            delivered |= set(ids)
        stats = http.get("/v1/stats").json()
    assert stats["cancelled"] == cancelled and stats["delivered"] == accepted - cancelled
    assert stats["errors"]["cancelled"] == 2 * cancelled
