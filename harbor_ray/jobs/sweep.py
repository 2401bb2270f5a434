"""A sweep (`harbor-ray sweep`): tasks x attempts on Ray rollout hosts, into a resumable
Parquet dataset under OUT, with the manifest that says what made it."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard, get_args

from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.capture.proxy.hosted import upstream_key
from harbor_ray.cluster.engine_metrics import metrics_url
from harbor_ray.cluster.fleet import FleetSettings, fleet_fields, settings_of, sized_for_nodes
from harbor_ray.cluster.host import Ingress
from harbor_ray.cluster.ingress import remote_endpoint
from harbor_ray.cluster.setup import ClusterSpec, running_cluster
from harbor_ray.cluster.sweep import SweepConfig, SweepStats, check_warm_pool, sweep
from harbor_ray.errors import StartError
from harbor_ray.jobs.interrupts import run_until_signalled
from harbor_ray.jobs.runs import (
    CheckedStart,
    Progress,
    RunRequest,
    checked_start,
    silent,
    specs_of,
)
from harbor_ray.trials.spec import RolloutSpec

__all__ = [
    "StartedSweep",
    "SweepRequest",
    "check_sweep",
    "checked_ingress",
    "run_sweep",
    "started_sweep",
]


@dataclass(frozen=True)
class SweepRequest(RunRequest, FleetSettings):
    """What to sweep and how; the fields are `harbor-ray sweep`'s flags (the fleet's
    among them, checked as the request is made)."""

    name: str = "sweep"  # part of every rollout id: the same name and out resume
    out: Path = Path("sweep")
    ray_address: str | None = None  # None: a local Ray for the sweep
    proxy_replicas: int = 2
    commit_every_s: float = 2.0
    ingress: Ingress = "host"
    proxy_url: str | None = None
    proxy_bind: str | None = None

    def __post_init__(self) -> None:
        if not self.engine_metrics and self.llm_url is not None:
            # The adaptive cap's default: the engine's own /metrics (as `vllm serve`).
            object.__setattr__(self, "engine_metrics", (metrics_url(self.llm_url),))
        super().__post_init__()

    def manifest(self, tasks: Sequence[str], engine: Certification | None) -> dict[str, Any]:
        """What the dataset's manifest says made it (`engine`: the certified one, None
        when the agent calls no model)."""
        return {
            "run": self.name,
            "agent": self.agent,
            "sandbox": self.sandbox,
            "sandbox_kwargs": dict(self.sandbox_kwargs),
            "dataset": self.dataset,
            "tasks": list(tasks),
            "attempts": self.attempts,
            **settings_of(self),
            "deadline_s": self.deadline_s,
            "budget": self.budget,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "reward_key": self.reward_key,
            "engine": engine.model_dump() if engine else None,
            "proxy_replicas": (self.proxy_replicas if engine and self.ingress != "host" else None),
            "ingress": self.ingress if engine else None,
            "commit_every_s": self.commit_every_s,
            "engine_timeout_s": self.engine_timeout_s,
            "stitch": self.stitch,
            "host_userland": self.host_userland,
            # The key file's path, never its contents (hosted.py).
            "capture": self.capture,
            "upstream": self.upstream,
            "upstream_key_file": (
                None if self.upstream_key_file is None else str(self.upstream_key_file)
            ),
        }


@dataclass(frozen=True)
class StartedSweep:
    """A sweep whose cluster, engine and proxy are up: what `run` sweeps, and where."""

    specs: list[RolloutSpec]
    config: SweepConfig
    manifest: dict[str, Any]

    def run(self, on_stats: Callable[[SweepStats], None] | None = None) -> SweepStats:
        """Sweep into `config.out`; `on_stats` hears the counts after every row."""
        return run_until_signalled(sweep(self.specs, self.config, self.manifest, on_stats=on_stats))


def run_sweep(
    request: SweepRequest,
    *,
    progress: Progress = silent,
    on_stats: Callable[[SweepStats], None] | None = None,
) -> SweepStats:
    """Start (or join) what the request needs, sweep into `request.out`, stop what was
    started. A request that cannot work raises before anything starts; `on_stats` hears
    the sweep's counts after every row."""
    with started_sweep(request, progress=progress) as started:
        return started.run(on_stats)


def check_sweep(request: SweepRequest, progress: Progress = silent) -> CheckedStart:
    """What a sweep checks before starting anything (`started_sweep` does it itself
    unless given the result)."""
    check_warm_pool(request.sandbox, request.warm_pool)  # before the backend's own checks
    checked = checked_start(request, progress)
    for reason in checked.refused:
        progress(f"environment_unsupported rows, no reward: {reason}")
    upstream_key(request.upstream_key_file)  # unreadable or empty: refused before Ray
    _config(request)
    names = {task.name for task in checked.tasks}
    if unknown := sorted(set(request.warm_pool) - names):
        raise StartError(
            f"--warm-pool names no task of the sweep: {', '.join(unknown)} "
            f"(its tasks: {', '.join(sorted(names))})"
        )
    return checked


@contextlib.contextmanager
def started_sweep(
    request: SweepRequest,
    *,
    progress: Progress = silent,
    checked: CheckedStart | None = None,
) -> Iterator[StartedSweep]:
    """Ray, the engine and the proxy the request needs, up for the duration (the CLI
    shows the sweep's progress only once they are)."""
    checked = checked or check_sweep(request, progress)
    config = _config(request)
    cluster = ClusterSpec(
        ray_address=request.ray_address,
        llm_url=request.llm_url,
        engine_config=request.engine,
        model=request.model,
        ingress=request.ingress,
        proxy_replicas=request.proxy_replicas,
        engine_timeout_s=request.engine_timeout_s,
        stitch=request.stitch,
        wants_model=checked.wants_model,
        proxy_url=request.proxy_url,
        proxy_bind=request.proxy_bind,
        logs_dir=config.out / "logs",
        engine_kind=request.engine_kind,
        capture=request.capture,
        upstream=request.upstream,
        upstream_key=upstream_key(request.upstream_key_file),
    )
    with contextlib.ExitStack() as stack:
        try:
            running = stack.enter_context(running_cluster(cluster, progress=progress))
        except OSError as exc:  # a port, a path or Ray's own start: the fix is the user's
            raise StartError(f"the sweep could not start: {exc}") from exc
        engine = running.certification
        if engine is not None:
            progress(
                f"engine: {engine.served_model} (tool calling: "
                f"{'yes' if engine.tool_calling else 'no'})"
            )
        specs = specs_of(
            request,
            checked.tasks,
            trials_dir=config.out / "trials",
            run_id=request.name,
            engine=running.provenance,
        )
        sized = sized_for_nodes(
            config, setting="--rollouts-per-host", warn=lambda why: progress(f"warning: {why}")
        )
        yield StartedSweep(
            specs,
            dataclasses.replace(sized, proxy=running.proxy),
            request.manifest([t.name for t in checked.tasks], engine),
        )


def checked_ingress(value: str) -> Ingress:
    """`value` as an Ingress, or the StartError that names --ingress's choices."""
    if _is_ingress(value):
        return value
    raise StartError(f"--ingress must be one of {', '.join(get_args(Ingress))}, not {value!r}")


def _is_ingress(value: str) -> TypeGuard[Ingress]:
    return value in get_args(Ingress)


def _config(request: SweepRequest) -> SweepConfig:
    """The driver's config, or a StartError naming the flag that cannot work."""
    checked_ingress(request.ingress)  # a library caller's string, unchecked by its type
    remote_endpoint(
        request.ingress, request.proxy_url, request.proxy_bind
    )  # raises the StartError itself
    return SweepConfig(
        out=request.out.resolve(), commit_every_s=request.commit_every_s, **fleet_fields(request)
    )  # raises the StartError itself
