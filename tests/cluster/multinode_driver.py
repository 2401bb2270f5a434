"""Drivers for the multi-node tests, run inside the head's namespace (a Ray driver lives
on a node): `python -m tests.cluster.multinode_driver JOB ADDRESS JSON`, which prints
one JSON line, the job's result, last."""

from __future__ import annotations

import json
import sys
from typing import Any

import ray


def placement(args: dict[str, Any]) -> dict[str, Any]:
    """Where tasks spread over the cluster land: node ids and IPs."""

    @ray.remote(num_cpus=0.1, scheduling_strategy="SPREAD")
    def where() -> tuple[str, str]:
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    landed = ray.get([where.remote() for _ in range(args.get("tasks", 12))])
    nodes = [{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"]}
             for n in ray.nodes() if n["Alive"]]
    return {"landed": sorted(set(landed)), "nodes": nodes}


JOBS = {"placement": placement}


def main() -> None:
    job, address, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    ray.init(address=address, log_to_driver=False)
    try:
        print(json.dumps(JOBS[job](args)))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
