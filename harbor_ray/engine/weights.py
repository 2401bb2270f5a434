"""In-flight weight updates of a running engine: every replica switches, or none does.

`WeightUpdater.update(path, version)` loads a checkpoint directory (Hugging Face layout,
safetensors) into every replica without restarting it: pause (requests in flight are
kept), reload, drop the cache if asked, label the weights with the version, resume, each
step on all replicas at once under its own timeout; a failure anywhere
rolls every replica back to the previous checkpoint, and the result names each
replica's step and why. A version that does not increase (`WeightVersionError`) and a
checkpoint whose tensors are not the served one's (`CheckpointError`, from
`check_checkpoint`) are refused before the engine is touched. The steps and their
failure modes: docs/architecture.md, "Weight updates in flight".

An engine with LoRA slots (`EngineConfig.lora`) takes adapters instead: a directory
holding `adapter_config.json` (peft's `save_pretrained`) is loaded on every replica under
a fresh name (step `load`), and only once all have it does each switch new calls to it
(step `switch`); there is no pause, since the base weights do not change. A failed load
removes the adapter where it loaded, and every replica keeps the previous version. Full
weights for a LoRA engine, and an adapter for an engine without LoRA slots, are refused
before any replica is touched (`CheckpointError`, naming the fix).

Replicas are known only as `EngineReplica` (a name and a way to call a method of Ray
Serve LLM's `LLMServer` on that one replica), so this runs without Ray;
`harbor_ray.engine.replicas` gives the Serve-backed replicas.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from harbor_ray.engine.checkpoints import (
    ADAPTER_CONFIG,
    check_adapter,
    check_checkpoint,
    is_adapter,
)
from harbor_ray.engine.worker import RELOAD_METHOD
from harbor_ray.errors import CheckpointError, WeightsRefusedError, WeightVersionError

LABEL_METHOD = "set_weight_version"
"""The server method that labels new weights with their version
(`harbor_ray.engine.versions.VersionedServer`'s)."""

KIND_METHOD = "weights_kind"
"""The server method that says whether the engine takes adapters (`VersionedServer`'s)."""

Step = Literal["pause", "reload", "cache", "label", "resume", "rollback", "load", "switch"]
STEPS: tuple[Step, ...] = ("pause", "reload", "cache", "label", "resume")
ADAPTER_STEPS: tuple[Step, ...] = ("load", "switch")

# The longest error text kept per replica: a worker's traceback can be pages long.
_ERROR_CHARS = 2000


class EngineReplica(Protocol):
    """One engine replica: `call` runs an `LLMServer` method on it and returns its result."""

    @property
    def name(self) -> str: ...

    async def call(self, method: str, /, **kwargs: Any) -> Any: ...


ListReplicas = Callable[[], Awaitable[Sequence[EngineReplica]]]
Call = tuple[str, Mapping[str, Any]]
"""An LLMServer method and its keyword arguments."""


@dataclass(frozen=True)
class StepTimeouts:
    """Seconds each step may take on one replica before that replica counts as failed.

    Reloading reads the whole checkpoint; the other steps only wait for the scheduler."""

    pause_s: float = 60.0
    reload_s: float = 600.0
    cache_s: float = 60.0
    label_s: float = 60.0
    resume_s: float = 60.0

    def of(self, step: Step) -> float:
        if step in ("reload", "rollback", "load"):
            return self.reload_s
        return self.label_s if step == "switch" else float(getattr(self, f"{step}_s"))


DEFAULT_TIMEOUTS = StepTimeouts()


@dataclass(frozen=True)
class ReplicaUpdate:
    """What one replica did during an update."""

    replica: str
    serving_version: int | None
    """The version its weights are after the update; None if no one can say (its
    rollback failed too, and it was left paused)."""
    seconds: Mapping[str, float] = field(default_factory=dict)
    """Wall seconds of each step it ran (`rollback` included when there was one)."""
    failed_step: Step | None = None
    error: str | None = None
    """The first failure: a timeout or the replica's exception, as text."""

    @property
    def ok(self) -> bool:
        return self.failed_step is None


@dataclass(frozen=True)
class WeightUpdate:
    """The answer to one `update`: ok only if every replica serves `requested_version`."""

    path: str
    requested_version: int
    version: int
    """The version serving after the update: the requested one if every replica took
    its weights, else the previous one."""
    replicas: tuple[ReplicaUpdate, ...]
    step_seconds: Mapping[str, float]
    """Wall seconds of each step across all replicas (they run it at once)."""
    seconds: float

    @property
    def ok(self) -> bool:
        return self.version == self.requested_version and all(r.ok for r in self.replicas)

    @property
    def failed(self) -> tuple[ReplicaUpdate, ...]:
        return tuple(r for r in self.replicas if not r.ok)


class _Replica:
    """One replica's progress through an update."""

    def __init__(self, replica: EngineReplica, timeouts: StepTimeouts) -> None:
        self.replica = replica
        self._timeouts = timeouts
        self.seconds: dict[str, float] = {}
        self.failed_step: Step | None = None
        self.error: str | None = None
        self.reloaded = False  # it started reloading, so its weights may have changed
        self.known = True  # its weights are a known version

    async def run(self, step: Step, call: Call) -> bool:
        """Run `step` on the replica; False (and the failure kept) if it failed."""
        method, kwargs = call
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self.replica.call(method, **kwargs), self._timeouts.of(step))
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                text = f"timed out after {self._timeouts.of(step):g} s"
            else:
                text = f"{type(exc).__name__}: {exc}"
            if self.failed_step is None:
                self.failed_step, self.error = step, text[:_ERROR_CHARS]
            return False
        finally:
            self.seconds[step] = time.perf_counter() - started
        return True

    def result(self, version: int) -> ReplicaUpdate:
        return ReplicaUpdate(
            replica=self.replica.name,
            serving_version=version if self.known else None,
            seconds=dict(self.seconds),
            failed_step=self.failed_step,
            error=self.error,
        )


class WeightUpdater:
    """Updates the weights of every replica of one engine, one update at a time.

    `path` and `version` are what the engine serves now (for the engine as started:
    its model directory and 0); the updater rolls back to them when an update fails.
    `reload_method` is the worker method that reloads: harbor_ray's engines have
    `reload_weights_tied`; any other vLLM engine has `reload_weights`. `label_method` is
    the server method that labels the new weights with their version, so that replies
    say which version sampled which token (harbor_ray's `VersionedServer`); None for an
    engine without one.

    `clear_cache` drops every replica's KV and prefix cache once the new weights are in:
    the requests kept across the update then recompute their context under the new
    weights. Without it (the default) they continue on the KV they had, and a new
    request never reuses a prefix of other weights because `VersionedServer` salts
    the prefix cache by version (docs/online.md, "Weight updates").
    """

    def __init__(
        self,
        replicas: ListReplicas,
        *,
        path: str,
        version: int = 0,
        timeouts: StepTimeouts = DEFAULT_TIMEOUTS,
        check: bool = True,
        reload_method: str = RELOAD_METHOD,
        label_method: str | None = LABEL_METHOD,
        clear_cache: bool = False,
    ) -> None:
        self._list_replicas = replicas
        self._reload_method = reload_method
        self._label_method = label_method
        self._clear_cache = clear_cache
        self._path = path
        self._version = version
        self._timeouts = timeouts
        self._check = check
        self._adapter: str | None = None  # the tag of the adapter serving (LoRA engines)
        self._lock = asyncio.Lock()

    @property
    def version(self) -> int:
        return self._version

    @property
    def path(self) -> str:
        return self._path

    async def update(self, path: str, version: int) -> WeightUpdate:
        """Serve the weights in checkpoint directory `path` as `version` on every replica."""
        async with self._lock:
            if version <= self._version:
                raise WeightVersionError(
                    f"version {version} does not increase on the serving {self._version}"
                )
            # The checkpoint is checked before the engine is asked anything; an
            # adapter's rank only once the replicas have said what they take.
            adapter = is_adapter(path)
            if self._check and not adapter:
                # Against the served weights' tensors, unless an adapter serves: then the
                # engine's own refusal (below) says what to send instead.
                served = None if is_adapter(self._path) else self._path
                await asyncio.to_thread(check_checkpoint, path, served)
            replicas = list(await self._list_replicas())
            if not replicas:
                raise WeightsRefusedError("the engine has no running replica to update")
            max_rank = await self._kind(replicas, adapter, path)
            if self._check and adapter:
                await asyncio.to_thread(check_adapter, path, max_rank)
            started = time.perf_counter()
            steps: dict[str, float] = {}
            states = [_Replica(replica, self._timeouts) for replica in replicas]
            if adapter:
                took = await self._switch_adapter(states, path, version, steps)
            else:
                took = await self._switch(states, path, version, steps)
            if took:
                self._path, self._version = path, version
            return WeightUpdate(
                path=path,
                requested_version=version,
                version=self._version,
                replicas=tuple(state.result(self._version) for state in states),
                step_seconds=steps,
                seconds=time.perf_counter() - started,
            )

    async def _kind(
        self, replicas: Sequence[EngineReplica], adapter: bool, path: str
    ) -> int | None:
        """The largest adapter rank every replica takes (None: no LoRA slots); refuses
        an update of the other kind than the engine takes."""
        if self._label_method is None:  # not harbor_ray's server: full weights only
            if adapter:
                raise CheckpointError(
                    f"{path} is a LoRA adapter ({ADAPTER_CONFIG}), and only harbor_ray's "
                    "engine (VersionedServer, with `lora:` in its config) loads adapters"
                )
            return None
        try:
            kinds = await asyncio.wait_for(
                asyncio.gather(*(replica.call(KIND_METHOD) for replica in replicas)),
                self._timeouts.label_s,
            )
        except Exception as exc:
            raise WeightsRefusedError(
                f"a replica did not say which updates it takes: {type(exc).__name__}: {exc}"[
                    :_ERROR_CHARS
                ]
            ) from exc
        lora = [bool(kind["lora"]) for kind in kinds]
        # CheckpointError: the caller sent the wrong directory, or started the wrong engine.
        if adapter and not all(lora):
            raise CheckpointError(
                f"{path} is a LoRA adapter ({ADAPTER_CONFIG}) but the engine has no LoRA "
                "slots: start it with `lora: {max_rank: R, max_loras: 2}` in its args "
                "(EngineConfig.lora), R at least the adapter's rank"
            )
        if not adapter and any(lora):
            raise CheckpointError(
                f"{path} holds full weights but the engine serves LoRA adapters (`lora:` "
                f"in its args): send the adapter directory (peft's save_pretrained: "
                f"{ADAPTER_CONFIG} and adapter_model.safetensors), or start the engine "
                "without `lora:` to update full weights"
            )
        return min((int(kind["max_rank"]) for kind in kinds if kind["lora"]), default=None)

    async def _switch_adapter(
        self, states: list[_Replica], path: str, version: int, steps: dict[str, float]
    ) -> bool:
        """Load the adapter on every replica, then switch every replica to it; True if
        all serve it. A failure before the switch removes it wherever it loaded."""
        tag = f"v{version}-{uuid.uuid4().hex[:12]}"
        load: Call = ("load_adapter", {"path": path, "version": str(version), "tag": tag})
        if await _step(steps, "load", states, load):
            if await _step(steps, "switch", states, ("use_adapter", {"tag": tag})):
                self._adapter = tag
                return True
            # Back to the adapter served before (None: the base model) where it switched.
            await self._roll_back_adapter(
                states, steps, ("use_adapter", {"tag": self._adapter}), serving=True
            )
        await self._roll_back_adapter(states, steps, ("drop_adapter", {"tag": tag}))
        return False

    async def _roll_back_adapter(
        self, states: list[_Replica], steps: dict[str, float], call: Call, *, serving: bool = False
    ) -> None:
        """`call` on every replica; if it switches what is `serving`, a replica where it
        failed serves no known version."""
        started = time.perf_counter()
        done = await asyncio.gather(*(state.run("rollback", call) for state in states))
        for state, ok in zip(states, done, strict=True):
            state.known = state.known and (ok or not serving)
        steps["rollback"] = steps.get("rollback", 0.0) + time.perf_counter() - started

    async def _switch(
        self, states: list[_Replica], path: str, version: int, steps: dict[str, float]
    ) -> bool:
        """Run the steps; True if every replica holds the new weights (resumed or not)."""
        if await _step(steps, "pause", states, _PAUSE):
            for state in states:
                state.reloaded = True
            took = (
                await _step(steps, "reload", states, self._reload(path))
                and (not self._clear_cache or await _step(steps, "cache", states, _CLEAR_CACHE))
                and (
                    self._label_method is None
                    or await _step(steps, "label", states, self._label(version))
                )
            )
            if not took:
                await self._roll_back(states, steps)
        else:
            took = False
        # A replica whose pause failed may be paused all the same: resume it too.
        await _step(steps, "resume", [s for s in states if s.known], _RESUME)
        return took

    def _reload(self, path: str) -> Call:
        """LLMServer.collective_rpc arguments that reload every worker's weights from `path`."""
        return "collective_rpc", {
            "method": self._reload_method,
            "kwargs": {"weights_path": path},
            # vLLM's own bound on the workers' answer, so it gives up when the updater does.
            "timeout": self._timeouts.reload_s,
        }

    def _label(self, version: int) -> Call:
        """The server call that labels the weights now loaded as `version`."""
        assert self._label_method is not None
        return self._label_method, {"version": str(version)}

    async def _roll_back(self, states: list[_Replica], steps: dict[str, float]) -> None:
        """The previous weights, a clean cache and the previous label, on every replica
        that began reloading."""
        started = time.perf_counter()
        touched = [state for state in states if state.reloaded]

        async def restore(state: _Replica) -> None:
            state.known = (
                await state.run("rollback", self._reload(self._path))
                and await state.run("rollback", _CLEAR_CACHE)
                and (
                    self._label_method is None
                    or await state.run("rollback", self._label(self._version))
                )
            )

        await asyncio.gather(*(restore(state) for state in touched))
        steps["rollback"] = time.perf_counter() - started


# vLLM's default pause aborts in-flight requests and drops the cache at once; keep them,
# and their KV (dropped once the new weights are in only when asked).
_PAUSE: Call = ("pause", {"mode": "keep", "clear_cache": False})
# Pausing again with clear_cache drops the KV cache of kept requests too (vLLM preempts
# them); LLMServer.reset_prefix_cache does not, and fails silently while they hold blocks.
_CLEAR_CACHE: Call = ("pause", {"mode": "keep", "clear_cache": True})
_RESUME: Call = ("resume", {})


async def _step(
    steps: dict[str, float], step: Step, states: Sequence[_Replica], call: Call
) -> bool:
    """Run `step` on every replica in `states` at once; True if it succeeded on all."""
    started = time.perf_counter()
    done = await asyncio.gather(*(state.run(step, call) for state in states))
    steps[step] = time.perf_counter() - started
    return all(done)
