"""The online controller as a detached, named Ray actor: every HTTP replica of the
service finds the same one by its app's name, and a replica's restart loses nothing."""

from __future__ import annotations

from typing import Any

import ray

from harbor_ray.cluster.host import Work
from harbor_ray.cluster.owner import NAMESPACE
from harbor_ray.cluster.policy_version import publish_version, start_policy_version
from harbor_ray.online.controller import Controller
from harbor_ray.online.controller_config import ControllerConfig
from harbor_ray.online.weights import EngineWeights
from harbor_ray.switches import WORKER_ENV

__all__ = ["controller_actor_name", "start_controller"]

# Calls the actor serves at once: every HTTP replica's long polls and submits, and the
# cancellations they wait on. Ray's default for async actors is 1,000.
_MAX_CALLS = 10_000


def controller_actor_name(app: str) -> str:
    return f"online-controller-{app}"


def start_controller(
    app: str, config: ControllerConfig, updater: EngineWeights, *, work: Work | None = None
) -> Any:  # ActorHandle
    """The controller as a detached named actor (get it again by name from any replica);
    the caller removes it (`ray.kill`) when the service ends. Its versions are published
    to the capture app's replicas (`PolicyVersion`), which stamp every turn with them."""
    on_version = None
    if config.proxy is not None:
        start_policy_version(config.proxy.app, config.initial_version)
        on_version = publish_version(config.proxy.app)
    remote = ray.remote(Controller).options(
        name=controller_actor_name(app),
        namespace=NAMESPACE,
        num_cpus=0,
        lifetime="detached",
        get_if_exists=True,
        max_concurrency=_MAX_CALLS,
        runtime_env={"env_vars": WORKER_ENV},
    )
    return remote.remote(config, updater, work=work, on_version=on_version)
