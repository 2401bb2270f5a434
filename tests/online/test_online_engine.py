"""The online loop for real: the service from serve_configs/online_cpu.yaml on the
session's engine (tests/fixtures/online.py), terminus-2 on two sample tasks x 2 at
version 0, one policy-gradient step on their sequences with transformers,
`POST /v1/weights` with version 1, and a new group whose turns carry version 1 and whose
logprobs are the stepped model's. And a weight update on the real engine that lands
mid-group (the stub agent, held after its first call)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray

from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.engine.lifecycle import EngineHandle
from harbor_ray.engine.replicas import serve_weight_updater
from harbor_ray.online.controller import ControllerConfig
from harbor_ray.serve_http import serve_details
from tests.fixtures.gate import Gate, held_after
from tests.fixtures.online import Online, online_service
from tests.fixtures.policy_step import CHANGED, max_gap, policy_gradient_step, rescore
from tests.online.conftest import assert_updated_mid_group, running_service, stub_agent

pytestmark = pytest.mark.integration

# Over an agent's whole conversation (a thousand ids and more, several turns) vLLM's and
# transformers' float32 CPU kernels drift further apart than over a short reply: 1.5e-3
# at worst was measured here. Still an order of magnitude below what the step moves.
SAME_OVER_A_CONVERSATION = 3e-3
SUBMIT = {
    "agent": "terminus-2",
    "sampling": {"max_tokens": 64, "temperature": 1.0},
    "budget": 3,
    "deadline_s": 900,
}


def _replica_actor(app: str) -> tuple[str, str]:
    """(replica id, actor name) of the one running replica of `app`."""
    [deployment] = serve_details().applications[app].deployments.values()
    [replica] = [r for r in deployment.replicas if r.state == "RUNNING"]
    return replica.replica_id, replica.actor_name


@pytest.fixture(scope="module")
def online(
    engine: EngineHandle, prepared_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Online]:
    with online_service(engine, prepared_model_dir, tmp_path_factory.mktemp("online")) as service:
        yield service


def test_the_online_loop_moves_the_engine_s_weights(
    online: Online, prepared_model_dir: Path, tmp_path: Path
) -> None:
    http = online.http
    assert http.get("/v1/policy").json()["version"] == 0
    first = {
        **SUBMIT,
        "request_id": "v0",
        "tasks": [{"task": "hello-file", "n": 2}, {"task": "count-words", "n": 2}],
    }
    accepted = http.post("/v1/rollouts", json=first)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["policy_version"] == 0

    # The HTTP replica dies mid-group: Serve starts another, which finds the same
    # controller actor; the retried submit starts nothing new.
    replica, actor = _replica_actor("online")
    ray.kill(ray.get_actor(actor, namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 600
    while True:
        try:
            if _replica_actor("online")[0] != replica:
                break
        except (ValueError, KeyError):
            pass  # no running replica yet
        assert time.monotonic() < deadline, "Serve did not replace the controller replica"
        time.sleep(2)
    again = http.post("/v1/rollouts", json=first)
    assert again.status_code == 202 and again.json() == accepted.json()
    stats = http.get("/v1/stats").json()
    assert stats["queued"] + stats["in_flight"] + stats["finished"] == 4

    groups = online.take(2)
    assert {g["task"] for g in groups} == {"hello-file", "count-words"}
    turns = [t for g in groups for t in g["turns"]]
    assert turns and {(t["policy_version_start"], t["policy_version_end"]) for t in turns} == {
        (0, 0)
    }
    samples = [
        (s["input_ids"], s["loss_mask"], s["reward"] or 0.0)
        for g in groups
        for s in g["sequences"]
        if s["role"] == "agent" and any(s["loss_mask"])
    ]
    assert samples, groups
    # Every group was also written to the dataset as it became ready.
    written = set(pq.read_table(online.out / "rollouts").column("rollout_id").to_pylist())
    assert written == {r["rollout_id"] for g in groups for r in g["rollouts"]}

    stepped = policy_gradient_step(prepared_model_dir, tmp_path / "step-1", samples)
    try:
        update = http.post("/v1/weights", json={"path": str(stepped), "version": 1})
        assert update.status_code == 200, update.text
        print(
            f"weight update through the API: {update.json()['seconds']:.1f}s "
            f"{update.json()['steps']}"
        )
        policy = http.get("/v1/policy").json()
        assert policy["version"] == 1 and [r["version"] for r in policy["replicas"]] == [1]

        second = {**SUBMIT, "request_id": "v1", "tasks": [{"task": "hello-file", "n": 2}]}
        assert http.post("/v1/rollouts", json=second).json()["policy_version"] == 1
        [group] = online.take(1)
        assert {(t["policy_version_start"], t["policy_version_end"]) for t in group["turns"]} == {
            (1, 1)
        }
        assert (group["policy_version_min"], group["policy_version_max"]) == (1, 1)
        checked = 0
        for sequence in group["sequences"]:
            mask = sequence["loss_mask"]
            if sequence["role"] != "agent" or not any(mask):
                continue
            recorded = [lp for lp, m in zip(sequence["logprobs"], mask, strict=True) if m]
            same = max_gap(recorded, rescore(stepped, sequence["input_ids"], mask))
            old = max_gap(recorded, rescore(prepared_model_dir, sequence["input_ids"], mask))
            print(
                f"{len(mask)} ids, {sum(mask)} sampled: {same:.2e} from the stepped "
                f"model, {old:.2e} from version 0"
            )
            assert same < SAME_OVER_A_CONVERSATION and old > CHANGED
            checked += 1
        assert checked, group
    finally:
        # Later tests share the engine: the default model's weights back.
        restored = http.post("/v1/weights", json={"path": str(prepared_model_dir), "version": 2})
        assert restored.status_code == 200, restored.text


def test_a_weight_update_lands_mid_group_on_the_real_engine(
    engine: EngineHandle, prepared_model_dir: Path, tmp_path: Path
) -> None:
    """The controller's update reloads the engine (its default weights again, as version
    1) while each rollout of a group waits after its first call; the hosts' capture apps
    learn the version from the policy version actor, so the second calls carry it."""
    app = "online-mid-group"
    proxy = ProxyTarget(url=engine.url, served_model=engine.model_id, ingress="host", app=app)
    updater = serve_weight_updater(engine.app_name, str(prepared_model_dir))
    gate = Gate.remote()
    with running_service(
        app,
        ControllerConfig(work_dir=tmp_path / "work", proxy=proxy),
        updater,
        stub_agent(2, between=held_after(0, gate)),
    ) as service:
        submitted = service.http.post(
            "/v1/rollouts",
            json={
                "request_id": "mid",
                "agent": "terminus-2",
                "tasks": [{"task": "hello-file", "n": 2}],
            },
        )
        assert submitted.status_code == 202, submitted.text
        assert ray.get(gate.arrived.remote(2, 600)) == 2
        update = service.http.post(
            "/v1/weights", timeout=900, json={"path": str(prepared_model_dir), "version": 1}
        )
        assert update.status_code == 200, update.text
        print(f"mid-group weight update on the engine: {update.json()['seconds']:.1f}s")
        ray.get(gate.open.remote())
        (group,) = service.wait_groups(1, timeout_s=600)
    assert all(r["ok"] for r in group["rollouts"]), group["rollouts"]
    assert_updated_mid_group(group)
