"""harbor_ray on a real multi-node Ray cluster made on one machine (tests/fixtures/multinode.py):
a head and two workers, each in its own network namespace."""

from __future__ import annotations

import json

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
