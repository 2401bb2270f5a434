"""SessionAffinityRouter in real Ray Serve: two replicas of a stand-in deployment that
answers which replica it is, called through a handle with Serve's `session_id` (what
Serve's HTTP proxy and Ray Serve LLM's ingress set from the x-session-id header the
capture proxy sends; the engine's own replicas are vLLM's, too heavy to start two of
here)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
import ray
from ray import cloudpickle, serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionResponse
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle
from ray.serve.llm import LLMConfig, build_openai_app
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponseChoice,
    ChatMessage,
)
from vllm.entrypoints.serve.engine.protocol import UsageInfo

from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.engine.config import AFFINITY_ROUTER, EngineConfig, to_llm_config
from harbor_ray.serve_http import serve_http_base
from tests.fixtures.fake_engine import free_port

pytestmark = pytest.mark.integration

APP = "affinity-test"
LLM_APP = "affinity-llm-test"


@serve.deployment(
    num_replicas=2,
    ray_actor_options={"num_cpus": 0},
    request_router_config=RequestRouterConfig(request_router_class=AFFINITY_ROUTER),
)
class WhichReplica:
    def __call__(self) -> tuple[str, str]:
        actor_name = ray.get_runtime_context().get_actor_name()
        assert actor_name is not None
        return serve.get_replica_context().replica_id.unique_id, actor_name


@pytest.fixture
def replicas(ray_cluster: None) -> Iterator[DeploymentHandle]:
    # The stand-in travels by value: Serve's workers need not import the tests.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    serve_on_a_free_port()
    handle = serve.run(WhichReplica.bind(), name=APP, route_prefix=None)
    try:
        yield handle
    finally:
        serve.delete(APP)


def serve_on_a_free_port() -> None:
    # Serve keeps its HTTP options if it already runs.
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})


def call(handle: DeploymentHandle, session: str) -> tuple[str, str]:
    answer: tuple[str, str] = handle.options(session_id=session).remote().result(timeout_s=60)
    return answer


def test_sessions_stick_spread_and_move_off_a_killed_replica(replicas: DeploymentHandle) -> None:
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


class ReplicaNamingServer(LLMServer):
    """Ray Serve LLM's server without vLLM: it answers a chat with its replica's id."""

    async def start(self) -> None:
        self.engine = None

    async def check_health(self) -> None:
        return None

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        replica = serve.get_replica_context().replica_id.unique_id

        async def reply() -> AsyncGenerator[Any, None]:
            yield ChatCompletionResponse(
                model=request.model,
                usage=UsageInfo(),
                choices=[
                    ChatCompletionResponseChoice(
                        index=0, message=ChatMessage(role="assistant", content=replica)
                    )
                ],
            )

        return reply()


@pytest.fixture
def llm_app(ray_cluster: None) -> Iterator[str]:
    """Ray Serve LLM's OpenAI app over two ReplicaNamingServer replicas, routed as
    `to_llm_config` routes the engine's; its base URL."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    serve_on_a_free_port()
    engine = to_llm_config(EngineConfig(num_replicas=2), "/no/model")
    llm = LLMConfig(
        model_loading_config=engine.model_loading_config,
        deployment_config=engine.deployment_config,  # the router
        server_cls=ReplicaNamingServer,
        # No engine processes to hold CPUs for.
        placement_group_config={"bundle_per_worker": {"CPU": 0.01}},
    )
    app = build_openai_app(
        {"llm_configs": [llm], "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}}
    )
    serve.run(app, name=LLM_APP, route_prefix="/affinity-llm")
    try:
        yield serve_http_base("/affinity-llm")
    finally:
        serve.delete(LLM_APP)


async def test_the_proxys_engine_client_reaches_one_replica_per_session_through_serve_llm(
    llm_app: str,
) -> None:
    engine = HttpEngine(llm_app)
    body = {"model": EngineConfig().model_id, "messages": [{"role": "user", "content": "x"}]}

    async def replica(session: str) -> str:
        reply = await engine.request("POST", "/v1/chat/completions", body, session=session)
        content: str = reply["choices"][0]["message"]["content"]
        return content

    try:
        placed = {s: await replica(s) for s in (f"session-{i}" for i in range(6))}
        assert len(set(placed.values())) == 2, placed
        for _ in range(3):
            for session, first in placed.items():
                assert await replica(session) == first
    finally:
        await engine.aclose()
