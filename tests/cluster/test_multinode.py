"""harbor_ray on a real multi-node Ray cluster made on one machine (tests/fixtures/multinode.py):
a head and two workers, each in its own network namespace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.fixtures.multinode import ROOT, NetnsCluster

SAMPLES = ROOT / "harbor_ray" / "samples" / "tasks"

pytestmark = pytest.mark.integration


def _job(cluster: NetnsCluster, job: str, timeout_s: float = 300, **args) -> dict:
    done = cluster.python_on(
        cluster.head,
        "tests.cluster.multinode_driver",
        job,
        cluster.address,
        json.dumps(args),
        timeout_s=timeout_s,
    )
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
def test_sweep_with_hosts_on_every_node(
    multinode: NetnsCluster, multinode_engine: str, tmp_path: Path, ingress: str
) -> None:
    """The stub agent through each ingress, hosts spread over the three nodes, one proxy
    replica (so `direct` relays cross nodes), the engine on a machine of its own: every
    row ok, on the node and host that ran it, each answered call one recorded turn."""
    out, calls, count = tmp_path / "out", 3, 6
    result = _job(
        multinode,
        "sweep",
        out=str(out),
        ingress=ingress,
        llm_url=multinode_engine,
        task="hello-file",
        count=count,
        calls=calls,
        concurrency=count,
        rollouts_per_host=1,
    )
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


def test_a_node_that_cannot_reach_the_engine_is_named(multinode: NetnsCluster) -> None:
    """An engine on the head's loopback: the driver (on the head) certifies it, and the
    workers, which cannot reach it, are each named before anything runs."""
    port = 8012
    engine = multinode.popen(
        multinode.head,
        [sys.executable, "-m", "harbor_ray.capture.proxy.fake_engine", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        result = _job(multinode, "certify", llm_url=f"http://127.0.0.1:{port}/v1")
    finally:
        engine.kill()
    error = result["error"]
    assert error is not None and result["driver"]
    for worker in multinode.workers:
        assert worker.ip in error
    assert f"{multinode.head.ip} (" not in error


def _slow_task(tmp_path: Path, seconds: int) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(SAMPLES / "hello-file", tasks / "slow")
    (tasks / "slow" / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nsleep {seconds}\necho hello > /app/hello.txt\n"
    )
    return tasks


def _sandboxed_in(cluster: NetnsCluster, node, sandboxes: Path) -> int:
    """How many processes in `node`'s namespace name a path under `sandboxes`."""
    prefix = os.fsencode(str(sandboxes)) + b"/"
    count = 0
    for pid in cluster.pids(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        count += any(arg.startswith(prefix) for arg in argv)
    return count


def _sweep_driver(cluster: NetnsCluster, args: dict) -> subprocess.Popen:
    """The sweep job running in the head's namespace (its result: `communicate`)."""
    return cluster.popen(
        cluster.head,
        [
            sys.executable,
            "-m",
            "tests.cluster.multinode_driver",
            "sweep",
            cluster.address,
            json.dumps(args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _wait_while_running(
    driver: subprocess.Popen, ready: Callable[[], object], timeout_s: float
) -> None:
    """Until `ready()` is truthy; fails, with the driver's output, if it ended first."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if driver.poll() is not None:
            pytest.fail(f"the driver ended first: {driver.communicate()}")
        assert time.monotonic() < deadline, f"not ready in {timeout_s:g} s"
        time.sleep(0.2)


def test_a_worker_node_killed_mid_sweep(multinode: NetnsCluster, tmp_path: Path) -> None:
    """The oracle agent in real bwrap sandboxes, a rollout per host over the three nodes;
    w2 is killed (everything in its namespace) while its sandboxes run. Its rollouts end
    `infra_lost`, are retried once, on the surviving nodes, and succeed: one row per
    rollout, none on w2, and nothing left of any sandbox."""
    out, count = tmp_path / "out", 6
    victim = multinode.nodes["w2"]
    args = {
        "out": str(out),
        "agent": "oracle",
        "dataset": str(_slow_task(tmp_path, 15)),
        "task": "slow",
        "count": count,
        "concurrency": count,
        "rollouts_per_host": 1,
        # One retry is enough: while Ray still lists w2 alive, the pool places no
        # new host there (its hosts died), so a retry does not die on w2 again.
        "retries": 1,
    }
    driver = _sweep_driver(multinode, args)
    try:
        _wait_while_running(
            driver, lambda: _sandboxed_in(multinode, victim, out / "sandboxes"), timeout_s=300
        )
        assert multinode.kill_node(victim) > 0
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        driver.kill()
        multinode.restart(victim)  # the session's later tests get three nodes again
    assert driver.returncode == 0, stderr[-5000:]
    assert json.loads(stdout.strip().splitlines()[-1]) == {"ok": count, "done": count}
    rows = _rows(out)
    assert sorted(r["rollout_id"] for r in rows) == [f"slow__{k}__mn" for k in range(count)]
    assert all(r["ok"] and r["reward"] == 1.0 for r in rows), [r["error"] for r in rows]
    retried = [r for r in rows if any(f["code"] == "infra_retries" for f in r["findings"])]
    assert retried, "no rollout was on the killed node"
    assert victim.ip not in {r["node"] for r in rows}
    sandboxes = out / "sandboxes"
    assert not sandboxes.exists() or list(sandboxes.iterdir()) == []
    for node in multinode.nodes.values():
        assert _sandboxed_in(multinode, node, sandboxes) == 0, node.name


def _checked_in(directory: Path) -> dict[str, str]:
    """Rollout id -> the address of the node it started on (multinode_driver.checked_in)."""
    return dict(path.name.split("@") for path in directory.iterdir())


def test_nodes_joining_mid_sweep_reach_a_replica_deployed_on_one_node(
    multinode: NetnsCluster, multinode_engine: str, tmp_path: Path
) -> None:
    """Both workers out, the sweep's one proxy replica is deployed on a cluster of one
    node, so its direct socket is on the head's loopback, out of reach of any other
    node. Each host asks for 0.9 CPU: the head (2 CPUs) runs two, and the others wait
    for room, as work waits for an autoscaler's nodes. The workers rejoin mid-sweep, one
    at a time (the head's rollouts, as a rule, still calling): the waiting hosts land on
    them, and their relays reach the replica only if it widened to the head's address
    when a node joined (no redeploy). With every node alive at deploy time the replica
    would listen on its node's address from the start: this is the path that widens.
    Every row ok, on every node, one row per rollout id, each call one recorded turn."""
    out, checkin = tmp_path / "out", tmp_path / "checkin"
    checkin.mkdir()
    calls, count = 4, 6
    args = {
        "out": str(out),
        "ingress": "direct",
        "llm_url": multinode_engine,
        "task": "hello-file",
        "count": count,
        "calls": calls,
        "think_s": 3.0,
        "concurrency": count,
        "rollouts_per_host": 1,
        "host_cpus": 0.9,
        "checkin": str(checkin),
    }
    down = list(multinode.workers)
    for worker in down:
        assert multinode.kill_node(worker) > 0
    try:
        multinode.wait_alive(1)  # the replica then sees one node
        driver = _sweep_driver(multinode, args)
        try:
            _wait_while_running(driver, lambda: _checked_in(checkin), timeout_s=180)
            before = _checked_in(checkin)
            while down:  # one at a time, as the fixture starts nodes
                multinode.restart(down[0])
                down.pop(0)
            stdout, stderr = driver.communicate(timeout=300)
        finally:
            driver.kill()
    finally:
        for worker in down:
            multinode.restart(worker)
        multinode.wait_alive(3)  # the session's later tests get three nodes
    assert driver.returncode == 0, stderr[-5000:]
    rows = _rows(out)
    assert sorted(r["rollout_id"] for r in rows) == [f"hello-file__{k}__mn" for k in range(count)]
    assert all(r["ok"] for r in rows), [(r["node"], r["error"]) for r in rows]
    assert json.loads(stdout.strip().splitlines()[-1]) == {"ok": count, "done": count}
    assert set(before.values()) == {multinode.head.ip}  # only the head ran rollouts before
    assert {r["node"] for r in rows} == {
        n.ip for n in multinode.nodes.values() if n.ray is not None
    }  # hosts on the joined nodes
    assert _checked_in(checkin) == {r["rollout_id"]: r["node"] for r in rows}
    turns = _rows(out, "turns")
    assert len(turns) == sum(r["counts"]["model_calls"] for r in rows) == calls * count
    assert len({(t["rollout_id"], t["index"]) for t in turns}) == len(turns)


def test_an_agent_in_a_remote_sandbox_reaches_the_proxy_through_proxy_url(
    multinode: NetnsCluster, multinode_engine: str, tmp_path: Path
) -> None:
    """Agents in a namespace of their own (no Ray, no host: a cloud sandbox's machine)
    reach the capture proxy only through `--proxy-url`, which lands on the head's relays;
    every answer is a recorded turn, a wrong key is refused, and a connection to a host's
    port on its node's address (routable from the sandbox) is refused: hosts listen on
    their loopback only."""
    remote = multinode.nodes.get("remote") or multinode.add_namespace("remote")
    out, calls, count = tmp_path / "out", 2, 3
    result = _job(
        multinode,
        "sweep",
        out=str(out),
        llm_url=multinode_engine,
        task="hello-file",
        count=count,
        calls=calls,
        concurrency=count,
        rollouts_per_host=1,
        remote_netns=remote.netns,
        proxy_url=f"http://{multinode.head.ip}:8770",
    )
    rows = _rows(out)
    assert result == {"ok": count, "done": count}, [r["error"] for r in rows]
    assert len(_rows(out, "turns")) == calls * count


def test_the_online_service_runs_a_group_over_the_nodes(
    multinode: NetnsCluster, multinode_engine: str, tmp_path: Path
) -> None:
    """The online service laid out as its `serve run` YAML does (the capture app from
    its builder, one replica; the controller behind its HTTP API), the stub agent on
    hosts spread over the nodes: two groups of two complete, every rollout ok, on more
    than one node, and each of its calls one recorded turn, through the engine across
    the bridge."""
    calls, n, tasks = 2, 2, ["hello-file", "count-words"]
    result = _job(
        multinode,
        "online",
        out=str(tmp_path / "work"),
        llm_url=multinode_engine,
        calls=calls,
        n=n,
        tasks=tasks,
    )
    rollouts = result["rollouts"]
    assert result["groups"] == sorted(tasks)
    assert len({r["rollout_id"] for r in rollouts}) == len(rollouts) == n * len(tasks)
    assert all(r["ok"] and "infra_retries" not in r["findings"] for r in rollouts), rollouts
    assert len({r["node"] for r in rollouts}) > 1, rollouts
    assert len({r["host"] for r in rollouts}) == len(rollouts)  # one rollout per host
    assert result["turns"] == calls * len(rollouts)


def _placed(answers: dict[str, list[dict]]) -> dict[str, dict]:
    """Each session's replica, asserting every call of it landed on that one."""
    for session, calls in answers.items():
        assert len({c["replica"] for c in calls}) == 1, (session, calls)
    return {session: calls[0] for session, calls in answers.items()}


def test_each_session_sticks_to_one_engine_replica_across_nodes(multinode: NetnsCluster) -> None:
    """Two stand-ins for the engine's replicas on different nodes, routed as the engine's
    config routes them (`routing: affinity`, SessionAffinityRouter), called through
    Serve's HTTP proxy with each session in `x-session-id`: every call of a session
    lands on one replica, both nodes hold sessions; when one replica's node dies, its
    sessions move to a replica on a live node and stick there, and the others stay."""
    sessions = [f"session-{i}" for i in range(12)]
    before = _placed(
        _job(multinode, "affinity", deploy=True, sessions=sessions, rounds=4)["answers"]
    )
    replicas = {(p["replica"], p["ip"]) for p in before.values()}
    assert len(replicas) == 2 and len({ip for _, ip in replicas}) == 2, replicas
    victim_ip = next(ip for _, ip in replicas if ip != multinode.head.ip)
    victim = next(n for n in multinode.workers if n.ip == victim_ip)
    moved = [s for s in sessions if before[s]["ip"] == victim_ip]
    kept = [s for s in sessions if s not in moved]
    assert multinode.kill_node(victim) > 0
    try:
        # A call that meets the dead replica (before Serve hears of its death) is sent
        # again; every call answered lands on one replica.
        after = _placed(
            _job(multinode, "affinity", sessions=moved, rounds=4, retry_s=180, timeout_s=400)[
                "answers"
            ]
        )
        assert all(after[s]["ip"] != victim_ip for s in moved), after
        assert _placed(
            _job(multinode, "affinity", sessions=kept, rounds=2, delete=True)["answers"]
        ) == {s: before[s] for s in kept}
    finally:
        multinode.restart(victim)
        multinode.wait_alive(3)  # the session's later tests get three nodes


@pytest.mark.parametrize("lost", ["host", "node"])
def test_a_dead_hosts_journal_is_read_on_its_node(
    multinode: NetnsCluster, multinode_engine: str, tmp_path: Path, lost: str
) -> None:
    """The stub agent on hosts spread over the nodes, each host journaling to its node's
    own disk (the sweep's journal directory is a link to `local_dir`, a different tmpfs
    on each node). One rollout on a worker holds after HELD calls; then its host's
    process alone is killed (`host`), or its whole node (`node`).

    `host`: the journal, on that worker's disk only, is read there: the lost try's row
    is partial `infra_lost` with exactly its HELD turns, the retry (one) adds its own
    CALLS and none of the lost ones, and no journal is left on any node. `node`: the
    journal went with the node's disk: the row is `infra_lost` with no turns (no retry),
    and the sweep ends all the same."""
    out, marker, calls, held, count = tmp_path / "out", tmp_path / "held", 4, 2, 6
    out.mkdir()
    (out / "journal").symlink_to(multinode.local_dir)
    retries = 1 if lost == "host" else 0
    # Hosts calling the engine themselves (`host`): a proxy replica on the node killed
    # would take every other node's calls down too.
    args = {
        "out": str(out),
        "ingress": "host",
        "llm_url": multinode_engine,
        "task": "hello-file",
        "count": count,
        "calls": calls,
        "think_s": 1.0,
        "concurrency": count,
        "rollouts_per_host": 1,
        "retries": retries,
        "journal": "flush",
        "hold": {"after": held, "marker": str(marker), "head_ip": multinode.head.ip},
    }
    workers = {n.ip: n for n in multinode.workers}
    driver = _sweep_driver(multinode, args)
    victim = None
    try:
        _wait_while_running(driver, marker.exists, timeout_s=240)
        who = json.loads(marker.read_text())
        victim = workers[who["ip"]]
        host = who["actor"].removeprefix("sessions-")
        # The journal is on the worker's disk, and nowhere else: not the head's, not the
        # path as the driver's machine sees it outside every node.
        assert f"{host}.journal" in multinode.local_files(victim)
        assert f"{host}.journal" not in multinode.local_files(multinode.head)
        assert not list(multinode.local_dir.iterdir())
        if lost == "host":
            os.kill(who["pid"], signal.SIGKILL)
        else:
            assert multinode.kill_node(victim) > 0
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        driver.kill()
        if lost == "node" and victim is not None:
            multinode.restart(victim)  # the session's later tests get three nodes again
            multinode.wait_alive(3)
    assert driver.returncode == 0, stderr[-5000:]
    rows = {r["rollout_id"]: r for r in _rows(out)}
    turns = _rows(out, "turns")
    assert len({(t["rollout_id"], t["index"]) for t in turns}) == len(turns)
    failed = {key: r for key, r in rows.items() if not r["ok"]}
    assert all(r["counts"]["turns"] == calls for r in rows.values() if r["ok"]), [
        r["error"] for r in failed.values()
    ]
    [row] = [r for r in failed.values() if r["host"] == host]
    assert (row["error_type"], row["node"]) == ("infra_lost", victim.ip)
    if lost == "host":
        assert json.loads(stdout.strip().splitlines()[-1]) == {"ok": count, "done": count}
        assert list(failed) == [row["rollout_id"]]
        assert row["rollout_id"].endswith(f"@{host}")
        assert row["partial"] and not row["trainable"] and row["counts"]["turns"] == held
        assert sorted(t["index"] for t in turns if t["rollout_id"] == row["rollout_id"]) == list(
            range(held)
        )
        # The retry's own turns, none of the lost ones: each answered call once.
        assert rows[row["rollout_id"].split("@")[0]]["ok"] and len(rows) == count + 1
        assert len(turns) == calls * count + held
    else:
        # Every rollout the node took down with it (its other host's too, no retry):
        # infra_lost with no turn, its journal gone with the node's disk.
        assert {r["node"] for r in failed.values()} == {victim.ip}, [
            (r["node"], r["error"]) for r in failed.values()
        ]
        assert len(rows) == count
        assert all(
            r["error_type"] == "infra_lost"
            and not r["partial"]
            and not (r["counts"] or {}).get("turns")
            for r in failed.values()
        )
        assert len(turns) == calls * (count - len(failed))
    for node in multinode.nodes.values():
        if node.ray is not None:
            assert not [f for f in multinode.local_files(node) if f.endswith(".journal")]
