"""The replicas of a running engine application, each callable on its own.

A weight update must reach every replica and say which one failed. Serve's handle
routes each call to whichever replica it picks, and its `broadcast` answers with
unlabelled results and skips a replica it finds dead; Ray Serve LLM's own broadcast
helper (`ray.llm._internal.serve.utils.broadcast`) instead calls each replica actor's
request entry point directly, and so does this module. The replicas are those Serve's
controller reports RUNNING (`serve_details`), named by their replica ids.
"""

from __future__ import annotations

import asyncio
import pickle
import uuid
from dataclasses import dataclass
from typing import Any

import ray
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.serve._private.common import RequestMetadata
from ray.serve._private.constants import SERVE_NAMESPACE

from harbor_ray.engine.tokenize import TokenizingServer
from harbor_ray.engine.versions import VersionedServer
from harbor_ray.engine.weights import (
    DEFAULT_TIMEOUTS,
    LABEL_METHOD,
    StepTimeouts,
    WeightUpdater,
)
from harbor_ray.engine.worker import RELOAD_METHOD
from harbor_ray.errors import WeightsRefusedError
from harbor_ray.serve_http import serve_details

# Ray Serve LLM names an engine's deployment "<server class>:<model id>"
# (build_llm_deployment): harbor_ray's engines use VersionedServer (TokenizingServer
# before it), others LLMServer.
_LLM_SERVER_PREFIXES = tuple(
    f"{cls.__name__}:" for cls in (VersionedServer, TokenizingServer, LLMServer)
)


@dataclass(frozen=True)
class ServeReplica:
    """One running replica of an `LLMServer` deployment (an `EngineReplica`)."""

    name: str
    """Serve's replica id."""
    actor: Any  # ActorHandle of the replica

    async def call(self, method: str, /, **kwargs: Any) -> Any:
        """`LLMServer.<method>(**kwargs)` on this replica. Cancelling the caller cancels
        the Ray call too, so a step that timed out stops waiting on the replica."""
        request_id = f"weights-{uuid.uuid4()}"
        metadata = RequestMetadata(
            request_id=request_id, internal_request_id=request_id, call_method=method
        )
        ref = self.actor.handle_request.remote(pickle.dumps(metadata), **kwargs)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise


def engine_deployment(app_name: str) -> str:
    """The name of the one `LLMServer` deployment of application `app_name`."""
    app = serve_details().applications.get(app_name)
    if app is None:
        raise WeightsRefusedError(f"no Serve application named {app_name!r}")
    names = [name for name in app.deployments if name.startswith(_LLM_SERVER_PREFIXES)]
    if len(names) != 1:
        raise WeightsRefusedError(
            f"application {app_name!r} has {len(names)} LLMServer deployments "
            f"({sorted(app.deployments)}); name the one to update"
        )
    return names[0]


def running_replicas(app_name: str, deployment: str) -> list[ServeReplica]:
    """The RUNNING replicas of `deployment` in `app_name`, as Serve reports them now."""
    app = serve_details().applications.get(app_name)
    details = app.deployments.get(deployment) if app is not None else None
    if details is None:
        raise WeightsRefusedError(f"no deployment {deployment!r} in application {app_name!r}")
    # A RUNNING replica has its actor, so its name is set.
    return [
        ServeReplica(
            name=replica.replica_id,
            actor=ray.get_actor(
                replica.actor_name,  # type: ignore[arg-type]
                namespace=SERVE_NAMESPACE,
            ),
        )
        for replica in details.replicas
        if replica.state == "RUNNING"
    ]


def serve_weight_updater(
    app_name: str,
    path: str,
    *,
    version: int = 0,
    deployment: str | None = None,
    timeouts: StepTimeouts = DEFAULT_TIMEOUTS,
    check: bool = True,
    reload_method: str = RELOAD_METHOD,
    label_method: str | None = LABEL_METHOD,
    clear_cache: bool = False,
) -> WeightUpdater:
    """A `WeightUpdater` for the engine application `app_name` (as `harbor-ray engine up`
    names it, `engine`), serving checkpoint `path` as `version` now.

    `deployment` defaults to the application's one LLMServer deployment. Nothing is
    asked of Serve until an update (the updater can be made before the engine runs, and
    sent to another process: the online controller's actor). The replicas
    are listed again at each update, so replicas Serve added or replaced since are
    included (a replacement starts from the engine's original model: updating to a new
    version reloads it along with the others). `reload_method`, `label_method` and
    `clear_cache` are `WeightUpdater`'s: for an engine harbor_ray did not build, pass
    `reload_method="reload_weights", label_method=None`.
    """

    def listed() -> list[ServeReplica]:
        return running_replicas(app_name, deployment or engine_deployment(app_name))

    async def replicas() -> list[ServeReplica]:
        # Serve's controller and the GCS answer through blocking calls.
        return await asyncio.to_thread(listed)

    return WeightUpdater(
        replicas,
        path=path,
        version=version,
        timeouts=timeouts,
        check=check,
        reload_method=reload_method,
        label_method=label_method,
        clear_cache=clear_cache,
    )
