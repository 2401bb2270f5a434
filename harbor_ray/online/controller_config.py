"""The online controller's config: the fleet settings (cluster/fleet.py) and the
service's own, as `ControllerArgs` (the YAML's `args:`) or a test makes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_ray.cluster.fleet import FleetSettings, settings_of
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.sweep import check_warm_pool
from harbor_ray.errors import ServiceConfigError
from harbor_ray.online.wire import StalePolicy
from harbor_ray.trials.agents import AgentAllowList
from harbor_ray.trials.backends import LOCAL

__all__ = ["ControllerConfig"]


@dataclass(frozen=True)
class ControllerConfig(FleetSettings):
    """How the controller runs rollouts (the fleet settings and the service's own); a
    submit says what each group is."""

    work_dir: Path  # trials and sandboxes live under it
    dataset: str = "samples"  # a submit's default
    # The other dataset specs a submit may name, spelled exactly so; no other is read.
    datasets: tuple[str, ...] = ()
    # Import paths (module:Class) a submit may name as its agent, besides the Harbor
    # agents `harbor-ray info` lists; no other is accepted, and nothing is imported here.
    agents: tuple[str, ...] = ()
    sandbox: str = LOCAL  # a submit's default
    # A task that needs its own image, on a sandbox that cannot build it, runs on the
    # host's userland (rows say `host_override`) instead of being refused (a row).
    host_userland: bool = False
    capacity: int = 256  # accepted rollouts unfinished at most (429 beyond)
    # The service's default cap is higher than a sweep's: it serves many trainers' groups.
    concurrency: int = field(default=16, kw_only=True)
    max_staleness: int | None = None  # the default bound, in policy versions
    stale_policy: StalePolicy = "drop"
    # A submit's defaults for groups without signal (rewards all equal): drop and
    # replace them (groups of 2 or more), at most `max_extra_groups` replacements per
    # request (None: as many as the request's groups).
    drop_no_signal: bool = False
    max_extra_groups: int | None = None
    proxy: ProxyTarget | None = None  # where agents call the model
    host_cpus: float = 0.01
    weights_timeout_s: float = 900.0  # a whole update; each step has its own below it
    retry_after_s: int = 5  # the 429's Retry-After
    initial_version: int = 0
    # What vLLM loads when the engine is harbor_ray's own app in this service (the
    # model source, and the chat template file it is handed; None: the model's own),
    # hashed once as the controller starts into every row's provenance. None: the
    # engine is not known here (one at a URL), and rows carry the harness's half only.
    engine_files: tuple[str, Path | None] | None = None
    # Where every group is also written as it becomes ready (the sweep's dataset
    # layout and writer); None: nowhere.
    out: Path | None = None
    # Retention of closed groups and of request ids (see harbor_ray.online.groups).
    retain_s: float = 600.0
    retain_groups: int = 10_000
    request_ids: int = 10_000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.capacity < 1:
            raise ServiceConfigError("capacity must be at least 1")
        if self.max_extra_groups is not None and self.max_extra_groups < 0:
            raise ServiceConfigError("max_extra_groups cannot be negative (0: no replacement)")
        check_warm_pool(self.sandbox, self.warm_pool)
        self.allowed_agents()  # UnknownAgentError (a ValueError) unless import paths

    def allowed_agents(self) -> AgentAllowList:
        """The agents a submit may name: the Harbor agents and `agents`."""
        return AgentAllowList(self.agents, named_in="in the controller's `agents:`")

    def manifest(self) -> dict[str, Any]:
        """What the dataset's manifest says made it: the controller's settings."""
        return {
            "dataset": self.dataset,
            "sandbox": self.sandbox,
            "host_userland": self.host_userland,
            "capacity": self.capacity,
            **settings_of(self),
            "max_staleness": self.max_staleness,
            "stale_policy": self.stale_policy,
            "drop_no_signal": self.drop_no_signal,
            "max_extra_groups": self.max_extra_groups,
            "initial_version": self.initial_version,
        }
