"""Faults under the controller: hosts lost mid-group, and load past capacity."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray

from harbor_ray.cluster.owner import NAMESPACE
from tests.cluster.test_journal_sweep import HELD_AFTER, _held_once
from tests.cluster.test_sweep import _slow_tasks
from tests.online.conftest import stub_agent
from tests.processes import sandbox_processes

pytestmark = pytest.mark.integration


def _hosts() -> set[str]:
    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith("sessions-")
    }


def _sandboxes_in(root: Path) -> list[Path]:
    """The sandbox directories under `root` (each host keeps its own directory there)."""
    return sorted(p for host in (root.iterdir() if root.is_dir() else ()) for p in host.iterdir())


def test_a_host_killed_mid_group_is_retried_on_a_fresh_sandbox_and_leaks_nothing(
    service_factory, tmp_path: Path
) -> None:
    dataset = _slow_tasks(tmp_path, 6)
    before = _hosts()
    service = service_factory("killed", work=None, dataset=str(dataset))
    sandboxes = tmp_path / "killed" / "sandboxes"
    submitted = service.http.post(
        "/v1/rollouts",
        json={
            "request_id": "slow",
            "agent": "oracle",
            "tasks": [{"task": "slow", "n": 2}],
            "deadline_s": 120,
        },
    )
    assert submitted.status_code == 202, submitted.text
    deadline = time.monotonic() + 120
    while len(_sandboxes_in(sandboxes)) < 2:
        assert time.monotonic() < deadline, "the rollouts' sandboxes never appeared"
        time.sleep(0.2)
    (host,) = _hosts() - before  # both rollouts share the one host
    ray.kill(ray.get_actor(host, namespace=NAMESPACE))

    (group,) = service.wait_groups(1, timeout_s=180)
    assert [r["ok"] for r in group["rollouts"]] == [True, True]
    assert all(r["reward"] == 1.0 for r in group["rollouts"])
    assert all(any(f["code"] == "infra_retries" for f in r["findings"]) for r in group["rollouts"])
    # The killed host's sandboxes are gone while the service runs, not only at its end.
    assert _sandboxes_in(sandboxes) == []
    assert sandbox_processes(sandboxes) == []


@pytest.mark.parametrize("retries", [0, 1])
def test_a_dead_hosts_journal_goes_once_its_rows_are_committed(
    service_factory, tmp_path: Path, retries: int
) -> None:
    """A host killed after HELD_AFTER journaled calls: its rollout's partial row is
    written (as the group's row with no retry, as a row of its own before the retry),
    and then its journal is removed while the service runs, not only at its end."""
    name, marker, out = f"journal{retries}", tmp_path / "held", tmp_path / "out"
    before = _hosts()
    service = service_factory(
        name,
        out=out,
        journal="fsync",
        retries=retries,
        work=stub_agent(4, between=_held_once(str(marker))),
    )
    submitted = service.http.post(
        "/v1/rollouts",
        json={"request_id": "j", "agent": "terminus-2", "tasks": [{"task": "hello-file", "n": 1}]},
    )
    assert submitted.status_code == 202, submitted.text
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "the rollout never held"
        time.sleep(0.1)
    (host,) = _hosts() - before
    journal = tmp_path / name / "journal" / f"{host.removeprefix('sessions-')}.journal"
    assert journal.stat().st_size > 0
    ray.kill(ray.get_actor(host, namespace=NAMESPACE))

    (group,) = service.wait_groups(1, timeout_s=180)
    [ok] = [r["ok"] for r in group["rollouts"]]
    assert ok == bool(retries)
    [lost] = [r for r in pq.read_table(out / "rollouts").to_pylist() if r["partial"]]
    assert (lost["error_type"], lost["counts"]["turns"]) == ("infra_lost", HELD_AFTER)
    # Removed on its node by a task the service does not wait on: it goes soon after.
    deadline = time.monotonic() + 60
    while journal.exists():
        assert time.monotonic() < deadline, "the dead host's journal is still there"
        time.sleep(0.2)


def test_over_capacity_is_429_until_rollouts_finish(service_factory) -> None:
    service = service_factory("overload", capacity=2, work=stub_agent(2, think_s=1.0))
    body = {"agent": "terminus-2", "tasks": [{"task": "hello-file", "n": 2}]}
    assert service.http.post("/v1/rollouts", json={**body, "request_id": "a"}).status_code == 202
    refused = service.http.post("/v1/rollouts", json={**body, "request_id": "b"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    service.wait_groups(1)
    # Finished (even unacknowledged) rollouts no longer count against the capacity.
    assert service.http.post("/v1/rollouts", json={**body, "request_id": "b"}).status_code == 202
    assert len(service.wait_groups(2)) == 2
