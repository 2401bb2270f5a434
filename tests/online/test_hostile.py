"""The controller's routes and MCP tools under hostile and unlucky input (issue 27's
triggers): each gets its 4xx naming the field, starts nothing and logs no traceback.
The controller runs in this process on `LocalRollouts` (no Ray)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from harbor_ray.engine.weights import WeightUpdater
from harbor_ray.online import submit_checks as checks_module
from harbor_ray.online.app import build_controller_app
from harbor_ray.online.weights import FakeWeightUpdater
from harbor_ray.online.wire import Group
from harbor_ray.trials.datasets import resolve_dataset
from tests.fixtures.reached import calls_of
from tests.fixtures.threaded import serve_in_thread
from tests.online.local import KEY, LocalRollouts, local_controller, served
from tests.online.test_mcp import mcp_client
from tests.playground.test_hostile import ODD_COUNTS
from tests.trials.hub_standin import HubRepo, serve_hub

SUBMIT = {"request_id": "r", "tasks": [{"task": "hello-file", "n": 1}], "agent": "terminus-2"}


def deep(levels: int) -> Any:
    return json.loads('{"a":' * levels + "1" + "}" * levels)


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def refused(reply: httpx.Response, status: int, field: str) -> str:
    assert (reply.status_code, reply.json().get("field")) == (status, field), reply.text
    return reply.json()["error"]


@pytest.fixture
def runner() -> LocalRollouts:
    return LocalRollouts()


@pytest.fixture
def http(tmp_path: Path, runner: LocalRollouts):
    with served(local_controller(tmp_path, runner=runner)) as client:
        yield client


# --- 1. dataset specs ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("dataset", "status"),
    [
        ("~nosuchuser", 404),
        ("~nosuchuser/x:y", 404),
        ("/" + "a" * 4000, 404),
        ("/" + "a" * 5000, 400),
    ],
)  # past PATH_MAX: refused as a value
def test_a_dataset_spec_that_breaks_path_handling_is_refused(
    tmp_path: Path, caplog, dataset: str, status: int
) -> None:
    # Configured: a spec not configured is refused before any path handling sees it.
    runner = LocalRollouts()
    checks_module._tasks.cache_clear()
    with (
        served(local_controller(tmp_path, runner=runner, datasets=(dataset,))) as http,
        calls_of(checks_module, "resolve_dataset", at_least=status == 404),
    ):
        error = refused(
            http.post("/v1/rollouts", json={**SUBMIT, "dataset": dataset}), status, "dataset"
        )
    assert status == 400 or "cannot be read" in error, error  # the resolution's refusal
    assert len(error) < 1000  # a 5,000-character spec is not echoed whole
    assert runner.started == 0 and logged_errors(caplog) == []


@pytest.mark.parametrize("dataset", ["~nosuchuser", "/" + "a" * 5000, "/etc"])
def test_mcp_tools_refuse_a_bad_dataset_as_a_tool_error_naming_it(
    tmp_path: Path, caplog, dataset: str
) -> None:
    # Configured: a spec not configured is refused before any path handling sees it.
    controller = local_controller(tmp_path, datasets=(dataset,))
    checks_module._tasks.cache_clear()
    with (
        serve_in_thread(build_controller_app(controller, KEY)) as url,
        calls_of(checks_module, "resolve_dataset"),
    ):

        async def run():
            async with mcp_client(url) as mcp:
                return (
                    await mcp.call_tool("list_tasks", {"dataset": dataset}),
                    await mcp.call_tool(
                        "run_rollout",
                        {"task": "hello-file", "agent": "terminus-2", "dataset": dataset},
                    ),
                )

        listed, ran = asyncio.run(run())
    for result in (listed, ran):
        assert result.is_error and ": dataset: " in result.content[0].text, result
    assert "cannot be read" in listed.content[0].text, listed  # the resolution's refusal
    assert logged_errors(caplog) == []


# --- 2. checkpoints ------------------------------------------------------------------


def _header_file(path: Path, header: bytes) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header)


@pytest.mark.parametrize("shape", ["directory", "dangling", "deep", "name too long"])
def test_a_checkpoint_file_that_breaks_the_header_check_is_a_400(
    tmp_path: Path, caplog, shape: str
) -> None:
    async def no_replicas() -> list:
        raise AssertionError("the engine is asked nothing before the checkpoint is checked")

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    target = checkpoint / "model.safetensors"
    if shape == "directory":
        target.mkdir()
    elif shape == "dangling":
        target.symlink_to(tmp_path / "gone")
    elif shape == "deep":
        _header_file(target, b"[" * 200_000 + b"]" * 200_000)
    else:
        checkpoint = Path("/" + "a" * 5000)
    updater = WeightUpdater(no_replicas, path=str(tmp_path / "served"))
    with served(local_controller(tmp_path / "work", updater=updater)) as http:
        refused(http.post("/v1/weights", json={"path": str(checkpoint), "version": 1}), 400, "path")
        assert http.get("/v1/policy").json()["version"] == 0
    assert logged_errors(caplog) == []


async def _no_replicas() -> list:
    raise AssertionError("the engine is asked nothing before the checkpoint is checked")


@pytest.mark.parametrize("shape", ["fifo", "link to a fifo", "device"])
def test_a_checkpoint_file_that_is_no_regular_file_is_a_400_at_once(
    tmp_path: Path, caplog, shape: str
) -> None:
    # Opening a FIFO for reading waits for a writer: the check must never open one.
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    target = checkpoint / "model.safetensors"
    if shape == "fifo":
        os.mkfifo(target)
    elif shape == "link to a fifo":
        os.mkfifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    else:
        target.symlink_to("/dev/zero")
    updater = WeightUpdater(_no_replicas, path=str(tmp_path / "served"))
    with served(local_controller(tmp_path / "work", updater=updater, weights_timeout_s=5)) as http:
        started = time.monotonic()
        error = refused(
            http.post("/v1/weights", json={"path": str(checkpoint), "version": 1}), 400, "path"
        )
        assert "not a regular file" in error and time.monotonic() - started < 3, error
        assert http.get("/v1/policy").json() == {"version": 0, "paused": False, "replicas": []}
    assert logged_errors(caplog) == []


class Unstoppable(FakeWeightUpdater):
    """An engine whose first update goes on for `hold_s` when told to stop (it swallows
    the cancellation, as a shielded call does), then takes; later ones take at once."""

    def __init__(self, hold_s: float) -> None:
        super().__init__(("engine-0",))
        self.hold_s = hold_s

    async def update(self, path: str, version: int):
        deadline, self.hold_s = time.monotonic() + self.hold_s, 0
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(left)
        return await super().update(path, version)


def test_an_update_that_times_out_unpauses_the_policy_whatever_the_engine_does(
    tmp_path: Path, caplog
) -> None:
    with served(
        local_controller(tmp_path, updater=Unstoppable(hold_s=4), weights_timeout_s=0.5)
    ) as http:
        started = time.monotonic()
        reply = http.post("/v1/weights", json={"path": "/ckpt/1", "version": 1})
        took = time.monotonic() - started
        assert reply.status_code == 502 and took < 3, (took, reply.text)
        assert "did not finish in 0.5 s" in reply.json()["error"]
        assert http.get("/v1/policy").json()["paused"] is False
        # The engine took it in the end: the controller says so once it did.
        for _ in range(100):
            if http.get("/v1/policy").json()["version"] == 1:
                break
            time.sleep(0.1)
        assert http.get("/v1/policy").json()["version"] == 1
        second = http.post("/v1/weights", json={"path": "/ckpt/2", "version": 2})
        assert second.status_code == 200 and second.json()["version"] == 2, second.text
    assert logged_errors(caplog) == []


# --- 2b. query counts ---------------------------------------------------------------


@pytest.mark.parametrize("given", [*ODD_COUNTS, "2.5", "1001"])
def test_an_odd_max_is_a_400_naming_it(http: httpx.Client, given: str) -> None:
    error = refused(http.get("/v1/groups", params={"max": given}), 400, "max")
    assert "whole number" in error
    assert http.get("/v1/groups", params={"max": "1000"}).status_code == 200


# --- 3. metadata ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        (deep(300), "deep"),
        (deep(60), "deep"),
        ({"blob": "x" * 200_000}, "bytes"),
        ({str(i): i for i in range(20_000)}, "bytes"),
    ],
)
def test_metadata_past_its_limits_is_refused_at_submit(
    http: httpx.Client, runner: LocalRollouts, metadata: Any, why: str
) -> None:
    error = refused(
        http.post("/v1/rollouts", json={**SUBMIT, "metadata": metadata}), 400, "metadata"
    )
    assert why in error
    assert runner.started == 0


def test_metadata_within_the_limits_comes_back_as_given(http: httpx.Client) -> None:
    metadata = {"step": 3, "nested": deep(20), "tags": ["a", "b"]}
    assert http.post("/v1/rollouts", json={**SUBMIT, "metadata": metadata}).status_code == 202
    (group,) = http.get("/v1/groups", params={"wait_s": 30}).json()["groups"]
    assert group["metadata"] == metadata


def _submit_text(metadata: str) -> str:
    """A submit's JSON with `metadata` written as given (numbers no encoder rounded)."""
    return json.dumps(SUBMIT)[:-1] + f', "metadata": {metadata}}}'


@pytest.mark.parametrize(
    ("metadata", "where"),
    [
        ('{"big": 18446744073709551616}', "metadata.big"),
        ('{"low": -9223372036854775809}', "metadata.low"),
        ('{"ids": [1, 100000000000000000000000000000000000000000]}', "metadata.ids.1"),
        ('{"d": {"e": %s}}' % ("9" * 4301), "metadata.d.e"),
    ],
)
def test_an_integer_past_64_bits_is_a_400_naming_where_it_is(
    http: httpx.Client, runner: LocalRollouts, metadata: str, where: str
) -> None:
    # orjson reads such an integer as a float: it would come back as another number.
    reply = http.post(
        "/v1/rollouts", content=_submit_text(metadata), headers={"content-type": "application/json"}
    )
    error = refused(reply, 400, where)
    assert "past 64 bits" in error and "as a string" in error, error
    assert runner.started == 0


def test_integers_at_the_64_bit_edges_come_back_as_given(http: httpx.Client) -> None:
    edges = '{"top": 18446744073709551615, "bottom": -9223372036854775808, "s": "%s"}' % (
        "1" * 40
    )  # digits in a string are a string
    assert (
        http.post(
            "/v1/rollouts",
            content=_submit_text(edges),
            headers={"content-type": "application/json"},
        ).status_code
        == 202
    )
    (group,) = http.get("/v1/groups", params={"wait_s": 30}).json()["groups"]
    assert group["metadata"] == {"top": 2**64 - 1, "bottom": -(2**63), "s": "1" * 40}


class Undeliverable:
    """A controller whose first ready group cannot be written as JSON."""

    def __init__(self) -> None:
        self.groups_asked = 0

    @staticmethod
    def group(group_id: str, metadata: dict[str, Any]) -> Group:
        return Group(
            group_id=group_id,
            request_id="r",
            task="t",
            n=0,
            metadata=metadata,
            policy_version_min=None,
            policy_version_max=None,
            finished_version=0,
            staleness=None,
            rollouts=[],
            sequences=[],
            turns=[],
        )

    async def groups(self, max_groups: int, wait_s: float) -> list[Group]:
        return [self.group("bad", deep(300)), self.group("good", {"ok": 1})]


def test_a_group_that_cannot_be_delivered_does_not_block_the_others(caplog) -> None:
    with serve_in_thread(build_controller_app(Undeliverable(), KEY)) as url:  # type: ignore[arg-type]
        reply = httpx.get(f"{url}/v1/groups", headers={"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200, reply.text
    assert [g["group_id"] for g in reply.json()["groups"]] == ["good"]
    assert logged_errors(caplog) == []


# --- 5. datasets outside the configured ones -----------------------------------------


def _task_dir(root: Path) -> Path:
    (task,) = [t for t in resolve_dataset("samples").tasks if t.name == "hello-file"]
    import shutil

    shutil.copytree(task.path, root / "hello-file")
    return root


def test_only_the_configured_datasets_are_read(tmp_path: Path, runner: LocalRollouts) -> None:
    elsewhere = _task_dir(tmp_path / "elsewhere")
    allowed = _task_dir(tmp_path / "allowed")
    secret = tmp_path / "secret.json"
    secret.write_text('["the first secret value"]')
    with served(
        local_controller(tmp_path / "work", runner=runner, datasets=(str(allowed),))
    ) as http:
        replies = {
            spec: http.post("/v1/rollouts", json={**SUBMIT, "dataset": spec})
            for spec in (str(elsewhere), f"{secret}:x", "/no/such/dir", f"{allowed}/.", "")
        }
        # The allow-listed one, spelled as configured, is read; the default too.
        assert (
            http.post(
                "/v1/rollouts", json={**SUBMIT, "request_id": "a", "dataset": str(allowed)}
            ).status_code
            == 202
        )
        assert http.post("/v1/rollouts", json={**SUBMIT, "request_id": "b"}).status_code == 202
    for spec, reply in replies.items():
        if spec == "":
            refused(reply, 400, "dataset")
            continue
        error = refused(reply, 404, "dataset")
        assert "secret value" not in error
        # Whether the path exists is not told: every refusal reads the same.
        assert error.replace(repr(spec), "SPEC") == replies["/no/such/dir"].json()["error"].replace(
            repr("/no/such/dir"), "SPEC"
        )
    assert runner.started == 2


def test_list_tasks_reads_only_the_configured_datasets(tmp_path: Path) -> None:
    elsewhere = _task_dir(tmp_path / "elsewhere")
    controller = local_controller(tmp_path / "work")
    with pytest.raises(Exception) as refusal:
        asyncio.run(controller.tasks(str(elsewhere)))
    assert getattr(refusal.value, "field", None) == "dataset"
    assert asyncio.run(controller.tasks(None)) == asyncio.run(controller.tasks("samples"))


def test_the_task_list_cache_is_bounded(tmp_path: Path) -> None:
    from harbor_ray.online import submit_checks as module

    module._tasks.cache_clear()
    controller = local_controller(tmp_path)
    samples = Path(resolve_dataset("samples").tasks[0].path).parent
    for i in range(50):
        with pytest.raises(Exception):  # noqa: B017 - any refusal; the cache is the point
            asyncio.run(controller.tasks(str(samples) + "/." * (i + 1)))
    asyncio.run(controller.tasks(None))
    # Only a configured dataset is ever listed, so only those are ever cached.
    assert module._tasks.cache_info().currsize == 1


def test_a_hub_dataset_is_fetched_only_when_configured(
    tmp_path: Path, runner: LocalRollouts, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harbor_ray.online import submit_checks as module

    (task,) = [t for t in resolve_dataset("samples").tasks if t.name == "hello-file"]
    files = {
        f"hello-file/{path.relative_to(task.path)}": path.read_bytes()
        for path in task.path.rglob("*")
        if path.is_file()
    }
    module._tasks.cache_clear()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with serve_hub({"org/allowed": HubRepo(files), "org/other": HubRepo(files)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        controller = local_controller(
            tmp_path / "work", runner=runner, datasets=("hf://org/allowed",)
        )
        with served(controller) as http:
            reply = http.post("/v1/rollouts", json={**SUBMIT, "dataset": "hf://org/other"})
            refused(reply, 404, "dataset")
            assert not any("org/other" in path for path in hub.requests)
            assert (
                http.post(
                    "/v1/rollouts",
                    json={**SUBMIT, "request_id": "a", "dataset": "hf://org/allowed"},
                ).status_code
                == 202
            )
    assert any("org/allowed" in path for path in hub.requests)
    assert runner.started == 1
    module._tasks.cache_clear()


# --- 6. agents -----------------------------------------------------------------------


def test_an_agent_import_path_not_allowed_is_a_404_and_nothing_is_imported(
    http: httpx.Client, runner: LocalRollouts
) -> None:
    sys.modules.pop("this", None)
    for agent in ("this:s", "os:system", "acp:anything"):
        refused(http.post("/v1/rollouts", json={**SUBMIT, "agent": agent}), 404, "agent")
    assert "this" not in sys.modules and runner.started == 0


def test_an_import_path_the_config_allows_is_accepted(tmp_path: Path) -> None:
    runner = LocalRollouts()
    agent = "tests.online.local:LocalRollouts"
    with served(local_controller(tmp_path, runner=runner, agents=(agent,))) as http:
        assert http.post("/v1/rollouts", json={**SUBMIT, "agent": agent}).status_code == 202
        refused(
            http.post(
                "/v1/rollouts",
                json={**SUBMIT, "request_id": "2", "agent": "tests.online.local:KEY"},
            ),
            404,
            "agent",
        )


def test_a_groups_unknown_agent_is_a_404_naming_it_and_the_known_ones(
    http: httpx.Client, runner: LocalRollouts
) -> None:
    """A request that mixes harnesses (an agent per group) is checked whole: one
    unknown agent, and none of its groups starts."""
    tasks = [
        {"task": "hello-file", "n": 1, "agent": "codex"},
        {"task": "hello-file", "n": 1, "agent": "no-such-harness"},
    ]
    error = refused(
        http.post("/v1/rollouts", json={**SUBMIT, "tasks": tasks}), 404, "tasks[1].agent"
    )
    assert "unknown agent 'no-such-harness'" in error
    known = error.split("(known: ", 1)[1]
    assert {"terminus-2", "codex", "claude-code"} <= set(known.rstrip(")").split(", "))
    assert runner.started == 0 and http.get("/v1/stats").json()["queued"] == 0
    tasks[1]["agent"] = "claude-code"
    assert http.post("/v1/rollouts", json={**SUBMIT, "tasks": tasks}).status_code == 202


# --- 7. Host names -------------------------------------------------------------------


def test_the_controller_answers_only_the_host_names_it_serves(http: httpx.Client) -> None:
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example"):
        reply = http.get("/v1/stats", headers={"host": host})
        assert reply.status_code == 421, (host, reply.status_code)
        mcp = http.post("/mcp", headers={"host": host}, json={})
        assert mcp.status_code == 421, (host, mcp.status_code)
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
        assert http.get("/v1/stats", headers={"host": host}).status_code == 200, host


def test_the_controller_s_host_names_are_configurable(tmp_path: Path) -> None:
    controller = local_controller(tmp_path)
    with served(controller, allowed_hosts=("trainer.internal",)) as http:
        assert http.get("/v1/stats", headers={"host": "trainer.internal:8000"}).status_code == 200
        assert http.get("/v1/stats").status_code == 421  # loopback no longer listed


# --- 10-11. MCP, Authorization, colour codes, empty strings --------------------------


def test_mcp_get_is_405_not_an_sse_stream(http: httpx.Client) -> None:
    # A stateless server has nothing to push: no stream a disconnect could break.
    with http.stream("GET", "/mcp", headers={"accept": "text/event-stream"}) as reply:
        assert reply.status_code == 405 and "POST" in reply.headers["allow"]


MCP = {"accept": "application/json, text/event-stream"}


def test_mcp_prompts_get_of_an_unknown_prompt_is_an_error_reply_not_a_traceback(
    http: httpx.Client, caplog
) -> None:
    for _ in range(3):
        reply = http.post(
            "/mcp",
            headers=MCP,
            json={"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "nope"}},
        )
        answer = reply.json()
        assert answer["id"] == 7 and answer["error"]["code"] == -32602, answer
        assert (
            "'nope'" in answer["error"]["message"] and "no prompts" in answer["error"]["message"]
        ), answer
    assert logged_errors(caplog) == []


@pytest.mark.parametrize("request_id", [{"a": 1}, 1.5, [1], True, None])
def test_an_mcp_request_whose_id_is_no_string_or_integer_is_an_invalid_request(
    http: httpx.Client, caplog, request_id: Any
) -> None:
    reply = http.post(
        "/mcp", headers=MCP, json={"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    )
    assert reply.status_code == 400, (reply.status_code, reply.text)
    answer = reply.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
    assert answer["error"]["code"] == -32600 and "id:" in answer["error"]["message"]
    # A notification (no id at all) is still one: accepted, no answer.
    note = http.post(
        "/mcp", headers=MCP, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert note.status_code == 202
    assert logged_errors(caplog) == []


def test_two_authorization_headers_are_refused_on_every_route(http: httpx.Client) -> None:
    right, wrong = f"Bearer {KEY}", "Bearer nope"
    url = str(http.base_url)
    for pair in ((right, wrong), (wrong, right), (right, right)):
        headers = [("authorization", pair[0]), ("authorization", pair[1])]
        assert httpx.get(f"{url}/v1/stats", headers=headers).status_code == 401, pair
        assert (
            httpx.post(
                f"{url}/mcp",
                headers=[*headers, ("accept", "application/json, text/event-stream")],
                json={},
            ).status_code
            == 401
        ), pair


def test_a_failed_weight_update_s_502_carries_no_colour_codes(tmp_path: Path) -> None:
    class Coloured(FakeWeightUpdater):
        async def update(self, path: str, version: int):
            update = await super().update(path, version)
            replica = update.replicas[0]
            coloured = type(replica)(
                **{**replica.__dict__, "error": "\x1b[36mray::LLMServer\x1b[39m failed\x1b[0m"}
            )
            return type(update)(**{**update.__dict__, "replicas": (coloured,)})

    updater = Coloured(("engine-0",), fail=("engine-0",))
    with served(local_controller(tmp_path, updater=updater)) as http:
        reply = http.post("/v1/weights", json={"path": "/ckpt", "version": 1})
    assert reply.status_code == 502
    assert "\x1b" not in reply.text and "ray::LLMServer failed" in reply.json()["error"]


@pytest.mark.parametrize("field", ["sandbox", "dataset", "agent"])
def test_an_empty_string_is_refused_not_the_default(
    http: httpx.Client, runner: LocalRollouts, field: str
) -> None:
    refused(http.post("/v1/rollouts", json={**SUBMIT, field: ""}), 400, field)
    assert runner.started == 0


# --- 10. every internal row names its cause ------------------------------------------


def test_an_internal_row_names_the_exception_and_where_it_was_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harbor_ray.trials import rollout
    from harbor_ray.trials.spec import make_specs

    async def broken(spec, capture, on_stage):
        raise RuntimeError()  # no message: the row must still say what and where

    monkeypatch.setattr(rollout, "_run", broken)
    (task,) = [t for t in resolve_dataset("samples").tasks if t.name == "hello-file"]
    (spec,) = make_specs(
        [task], 1, agent="oracle", sandbox="local", trials_dir=tmp_path, run_id="internal"
    )
    record = asyncio.run(rollout.run_rollout(spec, None))
    error = record.result.error
    assert record.result.error_type == "internal"
    assert "RuntimeError" in error and "test_hostile.py:" in error and "broken" in error
