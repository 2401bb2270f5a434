"""The controller's HTTP API through a real client against the running app: the
controller actor runs the stub agent on rollout hosts, through the capture proxy
deployment, against the fake engine."""

from __future__ import annotations

import httpx
import pytest
import ray

from harbor_ray.engine.weights import WeightUpdater
from harbor_ray.online.weights import FakeWeightUpdater
from tests.fixtures.gate import Gate, held_after
from tests.online.conftest import assert_updated_mid_group, stub_agent

pytestmark = pytest.mark.integration

SUBMIT = {"request_id": "req-1", "tasks": [{"task": "hello-file", "n": 2}], "agent": "terminus-2"}


def test_submit_deliver_ack_and_idempotent_resubmit(service_factory) -> None:
    service = service_factory("flow")
    first = service.http.post("/v1/rollouts", json=SUBMIT)
    assert first.status_code == 202, first.text
    again = service.http.post("/v1/rollouts", json=SUBMIT)
    assert again.json() == first.json()  # the same groups, nothing new started
    (group_ref,) = first.json()["groups"]
    assert group_ref["n"] == 2 and first.json()["policy_version"] == 0

    (group,) = service.wait_groups(1)
    assert group["group_id"] == group_ref["group_id"]
    assert len(group["rollouts"]) == 2 and all(r["ok"] for r in group["rollouts"])
    assert len(group["turns"]) == 4  # two calls per stub rollout
    assert all(t["prompt_ids"] for t in group["turns"])  # in full, not the delta
    assert {t["policy_version_start"] for t in group["turns"]} == {0}
    assert group["staleness"] == 0
    assert {s["rollout_id"] for s in group["sequences"]} == {
        r["rollout_id"] for r in group["rollouts"]
    }
    # Delivered again until acknowledged.
    assert service.http.get("/v1/groups").json()["groups"][0]["group_id"] == group["group_id"]
    ack = service.http.post("/v1/groups/ack", json={"group_ids": [group["group_id"]]})
    assert ack.json() == {"acknowledged": [group["group_id"]], "unknown": []}
    assert service.http.get("/v1/groups").json()["groups"] == []
    stats = service.http.get("/v1/stats").json()
    assert stats["finished"] == 2 and stats["delivered"] == 1 and stats["in_flight"] == 0
    assert service.http.get("/health").json() == {"ok": True}
    assert "/v1/groups/ack" in service.http.get("/openapi.json").json()["paths"]


def test_refusals_name_the_field_and_start_nothing(service_factory) -> None:
    service = service_factory("refusals", capacity=3)
    wrong = httpx.post(
        f"{service.url}/v1/rollouts", json=SUBMIT, headers={"authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    assert httpx.get(f"{service.url}/v1/stats").status_code == 401
    cases = [
        ({**SUBMIT, "tasks": [{"task": "hello-file", "n": "2"}]}, 400, "tasks.0.n"),
        ({**SUBMIT, "colour": "red"}, 400, "colour"),
        ({k: v for k, v in SUBMIT.items() if k != "agent"}, 400, "agent"),
        ({**SUBMIT, "tasks": [{"task": "no-such-task", "n": 1}]}, 404, "tasks[0].task"),
        ({**SUBMIT, "agent": "no-such-agent"}, 404, "agent"),
        ({**SUBMIT, "sandbox": "no-such-sandbox"}, 404, "sandbox"),
        ({**SUBMIT, "dataset": "/no/such/dir"}, 404, "dataset"),
    ]
    for body, status, field in cases:
        reply = service.http.post("/v1/rollouts", json=body)
        assert (reply.status_code, reply.json()["field"]) == (status, field), body
    bad_json = service.http.post(
        "/v1/rollouts", content=b"{", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert service.http.get("/v1/groups", params={"wait_s": "x"}).json()["field"] == "wait_s"
    over = service.http.post(
        "/v1/rollouts", json={**SUBMIT, "tasks": [{"task": "hello-file", "n": 4}]}
    )
    assert over.status_code == 429 and int(over.headers["retry-after"]) > 0
    stats = service.http.get("/v1/stats").json()
    assert stats["queued"] == stats["in_flight"] == stats["finished"] == 0
    # Within capacity it is accepted: the refused request_id was not taken either.
    assert service.http.post("/v1/rollouts", json=SUBMIT).status_code == 202


def test_weight_updates_move_the_version_only_when_every_replica_did(service_factory) -> None:
    service = service_factory(
        "weights", updater=FakeWeightUpdater(("engine-0", "engine-1"), fail=())
    )
    ok = service.http.post("/v1/weights", json={"path": "/ckpt/1", "version": 1})
    assert ok.status_code == 200 and ok.json()["version"] == 1
    assert [r["version"] for r in ok.json()["replicas"]] == [1, 1]
    stale = service.http.post("/v1/weights", json={"path": "/ckpt/1", "version": 1})
    assert (stale.status_code, stale.json()["field"]) == (409, "version")
    policy = service.http.get("/v1/policy").json()
    assert policy["version"] == 1 and policy["paused"] is False
    submitted = service.http.post("/v1/rollouts", json=SUBMIT).json()
    assert submitted["policy_version"] == 1
    # The proxy replicas learnt the version: every turn of the group is stamped with it.
    (group,) = service.wait_groups(1)
    assert {(t["policy_version_start"], t["policy_version_end"]) for t in group["turns"]} == {
        (1, 1)
    }
    assert (group["policy_version_min"], group["policy_version_max"]) == (1, 1)
    assert all(r["policy_version_min"] == 1 for r in group["rollouts"])


def test_a_weight_update_mid_group_reaches_the_proxy_replicas(service_factory) -> None:
    """Through the service: the controller's update, its policy version actor, the
    capture proxy's replicas. Each rollout waits after its first call until the update
    is done, so its second call is the new version's."""
    gate = Gate.remote()
    service = service_factory("mid-group", work=stub_agent(2, between=held_after(0, gate)))
    assert service.http.post("/v1/rollouts", json=SUBMIT).status_code == 202
    assert ray.get(gate.arrived.remote(2, 120)) == 2  # both first calls answered, at 0
    update = service.http.post("/v1/weights", json={"path": "/ckpt/1", "version": 1})
    assert update.status_code == 200, update.text
    ray.get(gate.open.remote())
    (group,) = service.wait_groups(1)
    assert all(r["ok"] for r in group["rollouts"]), group["rollouts"]
    assert_updated_mid_group(group)


def test_a_failed_replica_leaves_the_old_version_serving(service_factory) -> None:
    service = service_factory(
        "weights-fail", updater=FakeWeightUpdater(("engine-0", "engine-1"), fail=("engine-1",))
    )
    failed = service.http.post("/v1/weights", json={"path": "/ckpt/2", "version": 2})
    assert failed.status_code == 502
    assert "engine-1" in failed.json()["error"]
    by_replica = {r["replica"]: r for r in failed.json()["replicas"]}
    assert by_replica["engine-1"]["step"] == "reload" and not by_replica["engine-1"]["ok"]
    assert service.http.get("/v1/policy").json()["version"] == 0


def test_a_path_that_is_no_checkpoint_is_a_400_naming_path(service_factory, tmp_path) -> None:
    async def no_replicas() -> list:
        raise AssertionError("the engine is asked nothing before the checkpoint is checked")

    served = tmp_path / "served"
    served.mkdir()
    service = service_factory("weights-path", updater=WeightUpdater(no_replicas, path=str(served)))
    refused = service.http.post("/v1/weights", json={"path": str(tmp_path / "nope"), "version": 1})
    assert (refused.status_code, refused.json()["field"]) == (400, "path")
    assert "not a directory" in refused.json()["error"]
    assert service.http.get("/v1/policy").json()["version"] == 0


def test_cancel_ends_a_group_s_rollouts_as_cancelled_rows(service_factory) -> None:
    service = service_factory("cancel", work=stub_agent(200, think_s=0.5))
    (group,) = service.http.post("/v1/rollouts", json=SUBMIT).json()["groups"]
    reply = service.http.post(f"/v1/groups/{group['group_id']}/cancel")
    assert reply.status_code == 200 and reply.json()["cancelled"] == 2
    assert service.http.post("/v1/groups/nope/cancel").status_code == 404
    stats = service.http.get("/v1/stats").json()
    assert stats["errors"] == {"cancelled": 2} and stats["cancelled"] == 1
    assert stats["in_flight"] == 0 and service.http.get("/v1/groups").json()["groups"] == []


def test_host_ingress_turns_carry_the_version_too(service_factory, fake_engine) -> None:
    from harbor_ray.cluster.host import ProxyTarget

    engine, llm_url = fake_engine
    hosts_serve = ProxyTarget(
        url=llm_url, served_model=engine.model, ingress="host", app="online-host-ingress"
    )
    service = service_factory("host-ingress", proxy=hosts_serve)
    assert (
        service.http.post("/v1/weights", json={"path": "/ckpt/1", "version": 1}).status_code == 200
    )
    service.http.post("/v1/rollouts", json=SUBMIT)
    (group,) = service.wait_groups(1)
    assert {(t["policy_version_start"], t["policy_version_end"]) for t in group["turns"]} == {
        (1, 1)
    }


def test_every_ready_group_is_also_written_to_the_dataset(service_factory, tmp_path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "dataset"
    service = service_factory("dataset", out=out)
    service.http.post("/v1/rollouts", json=SUBMIT)
    (group,) = service.wait_groups(1)
    # On disk before it could be delivered, and before any acknowledgement.
    rollout_ids = {r["rollout_id"] for r in group["rollouts"]}
    assert set(pq.read_table(out / "rollouts").column("rollout_id").to_pylist()) == rollout_ids
    assert set(pq.read_table(out / "turns").column("rollout_id").to_pylist()) == rollout_ids
    assert (out / "_manifest.json").exists()
