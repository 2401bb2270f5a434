"""One sandbox start rate for a whole run, across every host: a Ray actor per backend
holding the run's `TokenBucket` (trials/start_rate.py), which each host draws a token
from before a sandbox of that backend starts.

A cap like Modal's (about 5 creations a second a workspace) holds for the run however
unevenly its hosts are busy: a host with many starts queued takes the tokens an idle
one does not use. The actor only reads the clock and asks the pure bucket; it is owned
by the driver (or the online controller) that made it, and ends with it.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from harbor_ray.trials.backends import LOCAL, ON_THIS_NODE
from harbor_ray.trials.start_rate import StartRate, TokenBucket

__all__ = ["StartBuckets"]


class _Bucket:
    def __init__(self, rate: StartRate) -> None:
        self._bucket = TokenBucket(rate, time.monotonic())

    def reserve(self) -> float:
        """The wall-clock time the start that takes this token is due (`wait_turn`)."""
        return time.time() + self._bucket.reserve(time.monotonic())


class StartBuckets:
    """The run's bucket actors, one per backend, made on the first start that asks."""

    def __init__(self, rate: StartRate | None) -> None:
        self.rate = rate
        self._actors: dict[str, Any] = {}  # backend -> ActorHandle

    def of(self, backend: str) -> Any | None:  # ActorHandle
        """The actor whose `reserve` a start on `backend` takes a token from; None
        without a limit."""
        if self.rate is None:
            return None
        # harbor_ray's own sandboxes (local, container) are bubblewrap starts on the
        # nodes, whichever `/` they get: one bucket, which the warm pool's starts share.
        backend = LOCAL if backend in ON_THIS_NODE else backend
        if backend not in self._actors:
            # No CPU: a cluster whose CPUs the rollouts' accounting holds must still run
            # it. Every host's call queues at this one actor, in arrival order; one
            # that dies (its node lost) comes back with a full bucket.
            self._actors[backend] = (
                ray.remote(_Bucket)
                .options(num_cpus=0, max_restarts=-1, max_task_retries=-1)
                .remote(self.rate)
            )
        return self._actors[backend]

    def close(self) -> None:
        for actor in self._actors.values():
            ray.kill(actor, no_restart=True)
        self._actors.clear()
