"""harbor_ray on a real multi-node Ray cluster made on one machine (tests/fixtures/multinode.py):
a head and two workers, each in its own network namespace."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.fixtures.multinode import NetnsCluster

pytestmark = pytest.mark.integration


def _job(cluster: NetnsCluster, job: str, timeout_s: float = 300, **args) -> dict:
    done = cluster.python_on(cluster.head, "tests.cluster.multinode_driver", job,
                             cluster.address, json.dumps(args), timeout_s=timeout_s)
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tasks_land_on_every_node(multinode: NetnsCluster) -> None:
    result = _job(multinode, "placement", tasks=12)
    ips = {n.ip for n in multinode.nodes.values()}
    assert {n["ip"] for n in result["nodes"]} == ips
    assert {ip for _, ip in result["landed"]} == ips
    assert len({node_id for node_id, _ in result["landed"]}) == 3


def _rows(out: Path, table: str = "rollouts") -> list[dict]:
    return pq.read_table(out / table).to_pylist()


@pytest.mark.parametrize("ingress", ["direct", "serve", "host"])
def test_sweep_with_hosts_on_every_node(multinode: NetnsCluster, multinode_engine: str,
                                        tmp_path: Path, ingress: str) -> None:
    """The stub agent through each ingress, hosts spread over the three nodes, one proxy
    replica (so `direct` relays cross nodes), the engine on a machine of its own: every
    row ok, on the node and host that ran it, each answered call one recorded turn."""
    out, calls, count = tmp_path / "out", 3, 6
    result = _job(multinode, "sweep", out=str(out), ingress=ingress, llm_url=multinode_engine,
                  task="hello-file", count=count, calls=calls, concurrency=count, per_host=1)
    rows = _rows(out)
    assert result == {"ok": count, "done": count}
    assert sorted(r["rollout_id"] for r in rows) == [f"hello-file__{k}__mn" for k in range(count)]
    assert all(r["ok"] for r in rows), [r["error"] for r in rows]
    node_ips = {n.ip for n in multinode.nodes.values() if n.ray is not None}
    assert {r["node"] for r in rows} == node_ips  # hosts on every node
    assert len({r["host"] for r in rows}) == count  # one rollout per host
    turns = _rows(out, "turns")
    assert len(turns) == sum(r["counts"]["model_calls"] for r in rows) == calls * count
    assert len({(t["rollout_id"], t["index"]) for t in turns}) == len(turns)
