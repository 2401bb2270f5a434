"""Drivers for the multi-node tests, run inside the head's namespace (a Ray driver lives
on a node): `python -m tests.cluster.multinode_driver JOB ADDRESS JSON`, which prints
one JSON line, the job's result, last. Workers import this module too (the cluster's
PYTHONPATH holds the repo), so work defined here runs on any node."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import ray
from ray import serve

from harbor_ray.capture.proxy.certify import certify_url
from harbor_ray.cluster.host import Work
from harbor_ray.cluster.setup import ClusterSpec, certify_from_every_node, running_cluster
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, RolloutResult
from harbor_ray.errors import CertificationError
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import CaptureService, RolloutSpec, make_specs
from tests.fixtures.stub_agent import chat_agent


def placement(address: str, args: dict[str, Any]) -> dict[str, Any]:
    """Where tasks spread over the cluster land: node ids and IPs."""
    ray.init(address=address, log_to_driver=False)

    @ray.remote(num_cpus=0.1, scheduling_strategy="SPREAD")
    def where() -> tuple[str, str]:
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    landed = ray.get([where.remote() for _ in range(args.get("tasks", 12))])
    nodes = [
        {"node_id": n["NodeID"], "ip": n["NodeManagerAddress"]} for n in ray.nodes() if n["Alive"]
    ]
    return {"landed": sorted(set(landed)), "nodes": nodes}


def checked_in(work: Work, directory: str) -> Work:
    """`work` that first leaves `<rollout id>@<node ip>` in `directory` (the machine's
    filesystem is shared by the namespaces), so a test sees where rollouts run."""

    async def run(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        Path(directory, f"{spec.rollout_id}@{ray.util.get_node_ip_address()}").touch()
        return await work(spec, capture)

    return run


def held_on_a_worker(after: int, marker: str, head_ip: str):
    """A stub agent's `between`: the first rollout to have `after` calls answered on a
    node other than the head (`head_ip`) leaves `marker` (its host's process id, node
    address and actor name) and waits forever, its turns journaled; any other rollout,
    and any retry (which finds the marker), goes on."""

    async def between(step: int) -> None:
        ip = ray.util.get_node_ip_address()
        if step != after - 1 or ip == head_ip or os.path.exists(marker):
            return
        mine = f"{marker}.{os.getpid()}.{step}"
        Path(mine).write_text(
            json.dumps(
                {"pid": os.getpid(), "ip": ip, "actor": ray.get_runtime_context().get_actor_name()}
            )
        )
        try:
            os.link(mine, marker)  # whole, and only the first rollout's
        except FileExistsError:
            return
        await asyncio.Event().wait()

    return between


def remote_work(netns: str, calls: int) -> Work:
    """Work whose agent runs in namespace `netns` (tests.cluster.remote_agent), reaching
    the proxy at the capture's `remote_url` only; ok if every answer it got is a recorded
    turn, a wrong key was refused and a connection to the host's port on its node's
    address (routable from there) was refused: the host listens on its loopback only."""

    async def run(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        assert capture is not None and capture.remote_url is not None
        session = await capture.open_session(budget=spec.budget, sampling=spec.sampling)
        host_port = urlsplit(capture.host_url).port
        try:
            agent = await asyncio.create_subprocess_exec(
                "ip",
                "netns",
                "exec",
                netns,
                sys.executable,
                "-m",
                "tests.cluster.remote_agent",
                capture.remote_url,
                session.key,
                capture.served_model,
                str(calls),
                f"{ray.util.get_node_ip_address()}:{host_port}",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await agent.communicate()
        finally:
            closed = await capture.close_session(session.session_id)
        recorded = [
            orjson.loads(t.response_message_json).get("content")
            for t in (closed.turns if closed else ())
        ]
        seen = json.loads(out.decode().strip().splitlines()[-1]) if agent.returncode == 0 else {}
        ok = (
            len(seen.get("answers", ())) == calls
            and seen["answers"] == recorded
            and seen["wrong_key"] == 401
            and seen["host_probe"] == "refused"
        )
        return encode_record(
            RolloutResult(
                rollout_id=spec.rollout_id,
                task=spec.task.name,
                attempt=spec.attempt,
                agent=spec.agent,
                sandbox=spec.sandbox,
                ok=ok,
                reward=1.0 if ok else 0.0,
                error=None if ok else f"remote agent: {seen or err.decode()[-2000:]}",
                error_type=None if ok else ErrorType.AGENT_ERROR,
                model=capture.served_model,
                counts=None if closed is None else closed.counts,
                model_calls=len(recorded),
            ),
            closed,
        )

    return run


def sweep_job(address: str, args: dict[str, Any]) -> dict[str, Any]:
    """A sweep of `count` attempts at `task` on the cluster: the stub agent making
    `calls` model calls through `ingress` (`llm_url` set), or `agent` in the bwrap
    sandbox (the real trial) when `calls` is absent. `hold`: `held_on_a_worker`'s
    arguments, one rollout on a worker held mid-way. `host_cpus`: what each host asks of
    Ray (a large one fills a node with few hosts, so that the rest wait for a node)."""
    out = Path(args["out"])
    stub = "calls" in args
    agent = "terminus-2" if stub else args["agent"]
    spec = ClusterSpec(
        ray_address=address,
        llm_url=args.get("llm_url"),
        ingress=args.get("ingress", "direct"),
        proxy_replicas=args.get("replicas", 1),
        wants_model=stub,
        proxy_url=args.get("proxy_url"),
    )
    tasks = select_tasks(resolve_dataset(args.get("dataset", "samples")), [args["task"]])
    specs = make_specs(
        tasks, args["count"], agent=agent, sandbox="local", trials_dir=out / "trials", run_id="mn"
    )
    # No retries: a call refused on the way fails its row instead of being retried unseen.
    between = None if "hold" not in args else held_on_a_worker(**args["hold"])
    work = (
        chat_agent(args["calls"], think_s=args.get("think_s", 0.0), retries=0, between=between)
        if stub
        else None
    )
    if "remote_netns" in args:
        work = remote_work(args["remote_netns"], args["calls"])
    if work is not None and "checkin" in args:
        work = checked_in(work, args["checkin"])
    with running_cluster(spec) as cluster:
        config = SweepConfig(
            out=out,
            concurrency=args["concurrency"],
            proxy=cluster.proxy,
            rollouts_per_host=args.get("rollouts_per_host", 2),
            retries=args.get("retries", 1),
            host_cpus=args.get("host_cpus", SweepConfig.host_cpus),
            journal=args.get("journal", SweepConfig.journal),
            commit_every_s=0,
        )
        stats = asyncio.run(sweep(specs, config, {}, work=work))
    return {"ok": stats.ok, "done": stats.done}


def certify_job(address: str, args: dict[str, Any]) -> dict[str, Any]:
    """Certify `llm_url` from the driver, then from every node: what the sweep's setup
    does before any rollout."""
    ray.init(address=address, log_to_driver=False)
    served = asyncio.run(certify_url(args["llm_url"])).served_model
    try:
        certify_from_every_node(args["llm_url"], served)
    except CertificationError as exc:
        return {"driver": served, "error": str(exc)}
    return {"driver": served, "error": None}


def online_job(address: str, args: dict[str, Any]) -> dict[str, Any]:
    """The online service as `serve run serve_configs/online_*.yaml` lays it out, on the
    cluster: the capture app from its builder (which knows nothing of nodes), the
    controller (its hosts running the stub agent, `calls` calls each) behind its HTTP
    API; `tasks` groups of `n` submitted, the finished groups' rollouts, turns and
    nodes."""
    from harbor_ray.cluster.proxy_deployment import ensure_serve
    from harbor_ray.online.app import ActorController, build_controller_app
    from harbor_ray.online.controller_actor import start_controller
    from harbor_ray.online.serve import ControllerArgs, build_capture, stop_controller
    from harbor_ray.online.weights import FakeWeightUpdater
    from tests.fixtures.threaded import serve_in_thread

    ray.init(address=address, log_to_driver=False)
    # As the sweeps here start it (a later test may need Serve on every interface).
    ensure_serve(across_nodes=True)
    engine = {"model_id": asyncio.run(certify_url(args["llm_url"])).served_model}
    serve.run(
        build_capture({"engine": engine, "engine_url": args["llm_url"], "replicas": 1}),
        name="capture",
        route_prefix="/capture",
    )
    config = ControllerArgs(
        engine=engine, work_dir=Path(args["out"]), concurrency=4, rollouts_per_host=1
    ).controller_config()
    handle = start_controller(
        "mn", config, FakeWeightUpdater(), work=chat_agent(args["calls"], retries=0)
    )
    try:
        with serve_in_thread(build_controller_app(ActorController(handle), "k")) as url:
            http = httpx.Client(base_url=url, headers={"authorization": "Bearer k"}, timeout=60)
            submitted = http.post(
                "/v1/rollouts",
                json={
                    "request_id": "mn",
                    "agent": "terminus-2",
                    "tasks": [{"task": task, "n": args["n"]} for task in args["tasks"]],
                },
            )
            submitted.raise_for_status()
            groups: list[dict[str, Any]] = []
            # Within the test's limit on this whole job (`_job`'s), so that a stall fails
            # here, saying what the service had done, not as a killed subprocess.
            deadline = time.monotonic() + args.get("groups_timeout_s", 180)
            while len(groups) < len(args["tasks"]):  # each poll has every unacked group
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{len(groups)} of {len(args['tasks'])} groups: "
                        f"{http.get('/v1/stats').json()}"
                    )
                groups = http.get("/v1/groups", params={"wait_s": 5}).json()["groups"]
    finally:
        asyncio.run(stop_controller(handle, "capture"))
        serve.delete("capture")
    keys = ("rollout_id", "ok", "node", "host", "error")
    return {
        "groups": sorted(g["task"] for g in groups),
        "turns": sum(len(g["turns"]) for g in groups),
        "rollouts": [
            {**{key: r[key] for key in keys}, "findings": [f["code"] for f in r["findings"]]}
            for g in groups
            for r in g["rollouts"]
        ],
    }


AFFINITY_APP = "affinity"


@serve.deployment(ray_actor_options={"num_cpus": 0})
class WhichNode:
    """Stands in for an engine replica (vLLM cannot run on three nodes of two cores):
    answers which replica it is and on which node."""

    def __call__(self) -> dict[str, str]:
        return {
            "replica": serve.get_replica_context().replica_id.unique_id,
            "node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
        }


@serve.deployment(ray_actor_options={"num_cpus": 0})
class SessionIngress:
    """As Ray Serve LLM's ingress does: the session named in the HTTP request's
    `x-session-id` goes on the handle that calls the replicas, where the deployment's
    request router (the engine's, here) reads it."""

    def __init__(self, replicas: Any) -> None:
        self.replicas = replicas

    async def __call__(self, request: Any) -> dict[str, str]:
        from ray.serve._private.http_util import session_id_from_headers

        session = session_id_from_headers(request.headers)
        handle = self.replicas.options(session_id=session) if session else self.replicas
        answer: dict[str, str] = await handle.remote()
        return answer


def affinity_job(address: str, args: dict[str, Any]) -> dict[str, Any]:
    """`rounds` calls of each of `sessions`, one call of every session a round, through
    Serve's HTTP proxy on the head with each session in `x-session-id` (as the capture
    proxy sends it) to an ingress pinned to the head, which calls two `WhichNode`
    replicas on different nodes, routed as `EngineConfig(num_replicas=2,
    routing=ROUTING)` routes the engine's replicas. `deploy`: deploy it first; `delete`:
    delete it after. A call refused on the way (its replica's node just died) is sent
    again until `retry_s` passes. Each session's answers, in order."""
    from ray.serve.config import RequestRouterConfig

    from harbor_ray.capture.proxy.upstream import SESSION_HEADER
    from harbor_ray.cluster.proxy_deployment import ensure_serve
    from harbor_ray.engine.config import EngineConfig, to_llm_config
    from harbor_ray.serve_http import serve_http_base

    ray.init(address=address, log_to_driver=False)
    ensure_serve(across_nodes=True)  # as the sweeps here start it
    if args.get("deploy"):
        engine = EngineConfig(num_replicas=2, routing=args.get("routing", "affinity"))
        deployment = to_llm_config(engine, "/no/model").deployment_config
        # `routing: load` sets no router: Serve's default.
        router = (
            {"request_router_config": RequestRouterConfig(**config)}
            if (config := deployment.get("request_router_config"))
            else {}
        )
        replicas = WhichNode.options(
            num_replicas=deployment["num_replicas"], max_replicas_per_node=1, **router
        )
        head = {f"node:{ray.util.get_node_ip_address()}": 0.01}
        ingress = SessionIngress.options(ray_actor_options={"num_cpus": 0, "resources": head})
        serve.run(ingress.bind(replicas.bind()), name=AFFINITY_APP, route_prefix="/affinity")
    url = serve_http_base("/affinity")
    answers: dict[str, list[dict[str, str]]] = {s: [] for s in args["sessions"]}
    deadline = time.monotonic() + args.get("retry_s", 0)
    with httpx.Client(timeout=60) as http:
        for _ in range(args["rounds"]):
            for session in args["sessions"]:
                while True:
                    try:
                        reply = http.post(url, headers={SESSION_HEADER: session})
                    except httpx.HTTPError as exc:  # the proxy gave up on the replica
                        failed: object = exc
                    else:
                        if reply.status_code == 200:
                            answers[session].append(reply.json())
                            break
                        failed = (reply.status_code, reply.text)
                    assert time.monotonic() < deadline, failed
                    time.sleep(0.5)
    if args.get("delete"):
        serve.delete(AFFINITY_APP)
    return {"answers": answers}


JOBS = {
    "placement": placement,
    "sweep": sweep_job,
    "certify": certify_job,
    "online": online_job,
    "affinity": affinity_job,
}


def main() -> None:
    job, address, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    try:
        print(json.dumps(JOBS[job](address, args)))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
