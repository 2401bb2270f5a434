"""`harbor-ray playground`'s app over HTTP: the Host check, the key, each visitor's own
runs, and no secret in any answer. Runs go through a stand-in for `run_rollouts` (same
call, same callbacks), so no sandbox or engine is started."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harbor_ray.cli import app as cli
from harbor_ray.data.writer import MANIFEST
from harbor_ray.errors import PlaygroundError
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.serve import serve_playground
from tests.playground.served import ENGINE, KEY, FakeRollouts, client_of, served

FORM = {"agent": "oracle", "dataset": "samples", "task": "hello-file", "attempts": 2}


def finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    for _ in range(500):
        run = client.get("/api/run", params={"id": run_id}).json()
        if run["status"] in ("done", "failed"):
            return run
        threading.Event().wait(0.02)
    raise AssertionError(f"run {run_id} never finished")


def test_the_page_and_the_tasks_are_served_on_loopback(catalog: Catalog, tmp_path: Path) -> None:
    with client_of(catalog, tmp_path) as client:
        assert "harbor_ray playground" in client.get("/").text
        tasks = client.get("/api/tasks").json()
        assert "hello-file" in {t["name"] for t in tasks["tasks"]}
        reply = client.get(
            "/api/file",
            params={"dataset": "samples", "task": "hello-file", "path": "../fix-mean/task.toml"},
        )
        assert reply.status_code == 400
        reply = client.get("/api/task", params={"dataset": "/etc", "task": "passwd"})
        assert reply.status_code == 404


def test_only_the_host_names_served_are_answered(catalog: Catalog, tmp_path: Path) -> None:
    with client_of(catalog, tmp_path) as client:
        for route in ("/", "/api/tasks", "/api/runs"):
            assert client.get(route, headers={"host": "evil.example"}).status_code == 421


def test_with_a_key_nothing_is_answered_without_it(catalog: Catalog, tmp_path: Path) -> None:
    with client_of(catalog, tmp_path, key=KEY) as client:
        assert client.get("/api/session").json() == {"needs_key": True, "admitted": False}
        for route in ("/api/tasks", "/api/setup", "/api/runs"):
            assert client.get(route).status_code == 401
        assert (
            client.get("/api/tasks", headers={"authorization": "Bearer wrong"}).status_code == 401
        )
        assert (
            client.get("/api/tasks", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        )
        assert client.post("/login", data={"key": "wrong"}).status_code == 401
        assert client.post("/login", data={"key": KEY}, follow_redirects=True).status_code == 200
        assert client.get("/api/tasks").status_code == 200


def test_a_visitor_sees_only_its_own_runs(catalog: Catalog, tmp_path: Path) -> None:
    rollouts = FakeRollouts()
    with (
        served(catalog, tmp_path, rollouts=rollouts) as url,
        httpx.Client(base_url=url) as alice,
        httpx.Client(base_url=url) as bob,
    ):
        mine = alice.post("/api/runs", json=FORM).json()
        theirs = bob.post("/api/runs", json=FORM).json()
        assert finished(alice, mine["id"])["reward"] == 0.5
        assert finished(bob, theirs["id"])["status"] == "done"
        assert [r["id"] for r in alice.get("/api/runs").json()["runs"]] == [mine["id"]]
        assert [r["id"] for r in bob.get("/api/runs").json()["runs"]] == [theirs["id"]]
        assert bob.get("/api/run", params={"id": mine["id"]}).status_code == 404
        forged = {"harbor_ray_playground_visitor": theirs["id"] + ".0000"}
        with httpx.Client(base_url=url, cookies=forged) as mallory:
            assert mallory.get("/api/runs").json()["runs"] == []
    assert [r.tasks for r in rollouts.requests] == [["hello-file"]] * 2
    assert all(r.llm_url == ENGINE and r.attempts == 2 for r in rollouts.requests)


def test_shared_runs_are_seen_by_every_visitor(catalog: Catalog, tmp_path: Path) -> None:
    with (
        served(catalog, tmp_path, share=True) as url,
        httpx.Client(base_url=url) as alice,
        httpx.Client(base_url=url) as bob,
    ):
        run = alice.post("/api/runs", json=FORM).json()
        finished(alice, run["id"])
        assert [r["id"] for r in bob.get("/api/runs").json()["runs"]] == [run["id"]]


def test_a_run_is_listed_while_it_runs(catalog: Catalog, tmp_path: Path) -> None:
    rollouts = FakeRollouts()
    rollouts.release.clear()
    with client_of(catalog, tmp_path, rollouts=rollouts) as client:
        run = client.post("/api/runs", json=FORM).json()
        for _ in range(500):
            listed = client.get("/api/runs").json()["runs"][0]
            if listed["planned"] == 2:
                break
            threading.Event().wait(0.02)
        assert listed["status"] == "running" and listed["rollouts"] == []
        rollouts.release.set()
        assert len(finished(client, run["id"])["rollouts"]) == 2


@pytest.mark.parametrize(
    "form, field",
    [
        ({**FORM, "dataset": "../samples"}, "dataset"),
        ({**FORM, "task": "../hello-file"}, "task"),
        ({**FORM, "attempts": 0}, "attempts"),
        ({**FORM, "engine": "visitor"}, "llm_url"),
        ({**FORM, "engine": "visitor", "llm_url": "http://elsewhere:1"}, "cannot be used"),
    ],
)
def test_a_form_naming_nothing_served_starts_nothing(
    catalog: Catalog, tmp_path: Path, form: dict[str, Any], field: str
) -> None:
    rollouts = FakeRollouts()
    with client_of(catalog, tmp_path, rollouts=rollouts) as client:
        reply = client.post("/api/runs", json=form)
        assert reply.status_code in (400, 404) and field in reply.json()["error"]
        assert client.get("/api/runs").json()["runs"] == [] and rollouts.requests == []


def test_no_answer_holds_the_key_or_the_engine_credentials(
    catalog: Catalog, tmp_path: Path
) -> None:
    failing = FakeRollouts(fail=RuntimeError(f"cannot reach {ENGINE}/v1"))
    with client_of(catalog, tmp_path, key=KEY, rollouts=failing) as client:
        replies = [
            client.get("/"),
            client.get("/api/session"),
            client.post("/login", data={"key": "wrong"}),
            client.post("/login", data={"key": KEY}, follow_redirects=False),
        ]
        run = client.post("/api/runs", json=FORM).json()
        assert finished(client, run["id"])["status"] == "failed"
        replies += [client.get(route) for route in ("/", "/api/tasks", "/api/setup", "/api/runs")]
        replies.append(client.get("/api/run", params={"id": run["id"]}))
        replies.append(client.get("/api/calls", params={"id": run["id"]}))
    for reply in replies:
        seen = reply.text + repr(reply.headers)
        assert KEY not in seen and "s3cret-token" not in seen, reply.url
        assert "engine.internal" not in seen, reply.url


def test_it_will_not_serve_beyond_loopback_without_a_key(tmp_path: Path) -> None:
    with pytest.raises(PlaygroundError, match="--key-file"):
        serve_playground(["samples"], out=tmp_path, host="0.0.0.0", port=0)


def test_the_flags_are_in_help() -> None:
    result = CliRunner().invoke(cli, ["playground", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in (
        "--key-file",
        "--share-runs",
        "--llm-url",
        "--allowed-host",
        "--max-runs",
        "--datasets-dir",
        "--allow-agent",
    ):
        assert flag in result.output


def test_a_run_s_calls_arrive_while_it_runs_after_a_cursor(
    catalog: Catalog, tmp_path: Path
) -> None:
    rollouts = FakeRollouts(calls=3)
    rollouts.release.clear()  # the rollout holds after its first call
    with client_of(catalog, tmp_path, rollouts=rollouts) as client:
        run = client.post("/api/runs", json={**FORM, "attempts": 1}).json()
        for _ in range(500):
            page = client.get("/api/calls", params={"id": run["id"], "after": 0}).json()
            if page["calls"]:
                break
            threading.Event().wait(0.02)
        assert [c["index"] for c in page["calls"]] == [0] and page["next"] == 1
        assert page["run"]["status"] == "running" and page["run"]["rollouts"] == []
        assert page["calls"][0]["reply"]["tool_calls"][0]["function"]["name"] == "bash"
        rollouts.release.set()
        done = finished(client, run["id"])
        assert done["calls"] == 3 and done["rollouts"][0]["reward"] == 0.5
        rest = client.get("/api/calls", params={"id": run["id"], "after": 1}).json()
        assert [c["seq"] for c in rest["calls"]] == [1, 2] and rest["next"] == 3
        assert rest["calls"][0]["earlier"] == 3 and not rest["more"]
        assert client.get("/api/calls", params={"id": run["id"], "after": 3}).json()["calls"] == []


def test_a_visitor_reads_only_its_own_runs_calls(catalog: Catalog, tmp_path: Path) -> None:
    with (
        served(catalog, tmp_path, rollouts=FakeRollouts(calls=2)) as url,
        httpx.Client(base_url=url) as alice,
        httpx.Client(base_url=url) as bob,
    ):
        run = alice.post("/api/runs", json=FORM).json()
        finished(alice, run["id"])
        assert len(alice.get("/api/calls", params={"id": run["id"]}).json()["calls"]) == 4
        reply = bob.get("/api/calls", params={"id": run["id"]})
        assert reply.status_code == 404 and "calls" not in reply.json()


@pytest.mark.parametrize(
    "params, status",
    [
        ({"id": "nope"}, 404),
        ({"after": "0"}, 404),
        ({"id": "RUN", "after": "-1"}, 400),
        ({"id": "RUN", "after": "two"}, 400),
        ({"id": "RUN", "after": "1e9"}, 400),
    ],
)
def test_a_calls_read_naming_no_run_or_no_cursor_is_refused(
    catalog: Catalog, tmp_path: Path, params: dict[str, str], status: int
) -> None:
    with client_of(catalog, tmp_path) as client:
        run = client.post("/api/runs", json=FORM).json()
        params = {k: v.replace("RUN", run["id"]) for k, v in params.items()}
        reply = client.get("/api/calls", params=params)
        assert reply.status_code == status and "error" in reply.json()


def test_a_run_writes_its_rollouts_to_a_dataset_under_the_served_root(
    catalog: Catalog, tmp_path: Path
) -> None:
    root = tmp_path / "datasets"
    with client_of(catalog, tmp_path / "runs", datasets_dir=root) as client:
        assert client.get("/api/runs").json()["writes_datasets"] is True
        run = client.post("/api/runs", json={**FORM, "write_to": "mine"}).json()
        assert finished(client, run["id"])["writes_to"] == "mine"
    table = pq.read_table(root / "mine" / "rollouts")
    assert sorted(table.column("rollout_id").to_pylist()) == ["r0", "r1"]
    manifest = json.loads((root / "mine" / MANIFEST).read_text())
    assert manifest["playground"]["run"] == run["id"] and manifest["schema_version"]


@pytest.mark.parametrize(
    "write_to, root, said",
    [
        ("../escape", "datasets", "one name"),
        ("/tmp/x", "datasets", "one name"),
        (".hidden", "datasets", "one name"),
        ("a/b", "datasets", "one name"),
        ("mine", None, "--datasets-dir"),
    ],
)
def test_a_dataset_the_server_does_not_allow_writes_nothing(
    catalog: Catalog, tmp_path: Path, write_to: str, root: str | None, said: str
) -> None:
    rollouts = FakeRollouts()
    datasets_dir = tmp_path / root if root else None
    with client_of(catalog, tmp_path, rollouts=rollouts, datasets_dir=datasets_dir) as client:
        reply = client.post("/api/runs", json={**FORM, "write_to": write_to})
        assert reply.status_code == 400 and said in reply.json()["error"]
        assert rollouts.requests == []
    assert not (tmp_path / "escape").exists() and not (tmp_path / "datasets").exists()


def test_a_landed_rollout_shows_the_end_of_its_verifier_output(
    catalog: Catalog, tmp_path: Path
) -> None:
    trial = tmp_path / "trial"
    (trial / "verifier").mkdir(parents=True)
    (trial / "verifier" / "test-stdout.txt").write_text("x" * 20_000 + "1 passed\n")
    with client_of(catalog, tmp_path, rollouts=FakeRollouts(trial_dir=trial)) as client:
        run = client.post("/api/runs", json={**FORM, "attempts": 1}).json()
        output = finished(client, run["id"])["rollouts"][0]["verifier_output"]
    assert output.endswith("1 passed\n") and len(output) == 16 * 1024


def test_a_run_stores_its_settings_and_its_model_once_known(
    catalog: Catalog, tmp_path: Path
) -> None:
    with client_of(catalog, tmp_path) as client:
        started = client.post(
            "/api/runs", json={**FORM, "temperature": 0.2, "max_tokens": 64, "budget": 5}
        ).json()
        expected = {
            "engine": "the server's",
            "agent": "oracle",
            "temperature": 0.2,
            "max_tokens": 64,
            "budget": 5,
            "attempts": 2,
        }
        assert started["settings"] == {**expected, "model": None}
        run = finished(client, started["id"])
        assert run["settings"] == {**expected, "model": "test-model"}  # from its results
        assert run["ended_at"] >= run["started_at"]
        listed = client.get("/api/runs").json()["runs"]
        assert listed[0]["settings"] == run["settings"]


def test_a_run_whose_every_rollout_errored_is_failed(catalog: Catalog, tmp_path: Path) -> None:
    rollouts = FakeRollouts(
        landing={"error_type": "agent_setup", "reward": None, "error": "npm: not found"}
    )
    with client_of(catalog, tmp_path, rollouts=rollouts) as client:
        run = finished(client, client.post("/api/runs", json=FORM).json()["id"])
        assert run["status"] == "failed"
        assert run["error"] == ("every rollout failed (2); the first: agent_setup: npm: not found")
        assert [r["verdict"] for r in run["rollouts"]] == ["error", "error"]


def test_each_view_has_its_url_and_other_paths_get_the_app_s_404(
    catalog: Catalog, tmp_path: Path
) -> None:
    with client_of(catalog, tmp_path) as client:
        for path in (
            "/tasks",
            "/task/samples/fix-mean",
            "/task/x",
            "/runs",
            "/setup",
            "/run/0123abcd",
            "/compare/a,b",
        ):
            reply = client.get(path)
            assert reply.status_code == 200 and "harbor_ray playground" in reply.text
        missing = client.get("/no/such/page")
        assert missing.status_code == 404 and "/task/DATASET/NAME" in missing.text
        api = client.get("/api/nothing")
        assert api.status_code == 404 and api.json() == {"error": "no such route"}
