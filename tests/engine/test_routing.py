"""SessionAffinityRouter in real Ray Serve: two replicas of a stand-in deployment that
answers which replica it is, called through a handle with Serve's `session_id` (what
Serve's HTTP proxy and Ray Serve LLM's ingress set from the x-session-id header the
capture proxy sends; the engine's own replicas are vLLM's, too heavy to start two of
here)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest
import ray
from ray import cloudpickle, serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle

from harbor_ray.engine.config import AFFINITY_ROUTER

pytestmark = pytest.mark.integration

APP = "affinity-test"


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0},
                  request_router_config=RequestRouterConfig(request_router_class=AFFINITY_ROUTER))
class WhichReplica:
    def __call__(self) -> tuple[str, str]:
        actor_name = ray.get_runtime_context().get_actor_name()
        assert actor_name is not None
        return serve.get_replica_context().replica_id.unique_id, actor_name


@pytest.fixture
def replicas(ray_cluster: None) -> Iterator[DeploymentHandle]:
    # The stand-in travels by value: Serve's workers need not import the tests.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with socket.socket() as probe:  # Serve keeps its HTTP options if it already runs
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(WhichReplica.bind(), name=APP, route_prefix=None)
    try:
        yield handle
    finally:
        serve.delete(APP)


def call(handle: DeploymentHandle, session: str) -> tuple[str, str]:
    answer: tuple[str, str] = handle.options(session_id=session).remote().result(
        timeout_s=60)
    return answer


def test_sessions_stick_spread_and_move_off_a_killed_replica(
        replicas: DeploymentHandle) -> None:
    sessions = [f"session-{i}" for i in range(8)]
    placed = {s: call(replicas, s) for s in sessions}
    # Every later call of a session lands where its first did.
    for _ in range(3):
        for session in sessions:
            assert call(replicas, session) == placed[session]
    # First calls went to the least loaded: both replicas took sessions.
    assert len(set(placed.values())) == 2, placed

    victim = placed[sessions[0]]
    moved = [s for s in sessions if placed[s] == victim]
    kept = [s for s in sessions if placed[s] != victim]
    ray.kill(ray.get_actor(victim[1], namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 120
    landed: dict[str, tuple[str, str]] = {}
    while len(landed) < len(moved):
        for session in moved:
            if session in landed:
                continue
            try:
                landed[session] = call(replicas, session)
            except (RayActorError, ActorUnavailableError):  # routed there before the
                # router heard of the death
                assert time.monotonic() < deadline, "the dead replica's sessions never moved"
                time.sleep(0.5)
    for session in moved:
        assert landed[session] != victim
        # ...and stick where they moved.
        for _ in range(3):
            assert call(replicas, session) == landed[session]
    for session in kept:
        assert call(replicas, session) == placed[session]


def test_calls_without_a_session_are_spread_by_load(replicas: DeploymentHandle) -> None:
    answers = {replicas.remote().result(timeout_s=60) for _ in range(40)}
    assert len(answers) == 2
