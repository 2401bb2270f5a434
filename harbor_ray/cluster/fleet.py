"""The fleet settings: how many rollouts run at once and how the hosts that run them
behave, the same for a sweep and the online service.

Declared once here, with each setting's flag and description, and used by every
surface that takes them: `harbor-ray sweep`'s flags, `SweepRequest`, the sweep driver's
`SweepConfig`, the controller's `ControllerConfig` and the online YAML's `args:`
(`ControllerArgs`). Each surface's own settings (a sweep's `out`, the service's
`capacity`) stay on it. The checks run once, when a `FleetSettings` is made; a manifest
lists them with `settings_of`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from harbor_ray.capture.core.journal import JournalMode
from harbor_ray.cluster.admission import AdmissionPolicy
from harbor_ray.errors import StartError
from harbor_ray.trials.start_rate import StartRate

if TYPE_CHECKING:
    from harbor_ray.cluster.runner import RetryPolicy

__all__ = [
    "FleetSettings",
    "fleet_fields",
    "fleet_flag",
    "fleet_help",
    "settings_of",
    "sized_for_nodes",
]


def _about(help: str, *, flag: str | None = None) -> dict[str, str | None]:
    """A setting's description and, where it is not the field's own name, its
    command-line flag (the YAML key is always the field's name)."""
    return {"help": help, "flag": flag}


@dataclass(frozen=True, kw_only=True)
class FleetSettings:
    """How many rollouts run at once, and how the hosts that run them behave."""

    concurrency: int = field(
        default=8,
        metadata=_about(
            "Rollouts at once (the only cap); with max_concurrency, the cap to start from."
        ),
    )
    max_concurrency: int | None = field(
        default=None,
        metadata=_about(
            "Make the cap adaptive: it rises (to this at most) while the engines are idle "
            "and falls on preemptions, requests queued in the engines or a KV cache over 90% "
            "full, read from engine_metrics every metrics_every_s seconds. Default: off, "
            "concurrency is fixed. Hosts are sized for this."
        ),
    )
    min_concurrency: int = field(
        default=1, metadata=_about("With max_concurrency: the adaptive cap never falls below this.")
    )
    engine_metrics: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            "With max_concurrency: an engine replica's Prometheus URL (repeatable). A sweep's "
            "default: /metrics of --llm-url's server (as `vllm serve` answers). For an engine on "
            "Ray Serve LLM (log_engine_metrics: true): each node's Ray metrics endpoint, e.g. "
            "http://NODE:8080/metrics."
        ),
    )
    metrics_every_s: float = field(
        default=5.0,
        metadata=_about(
            "Seconds between reads of the engines' metrics (max_concurrency).",
            flag="--metrics-every",
        ),
    )
    rollouts_per_host: int = field(
        default=8,
        metadata=_about(
            "Rollouts one host actor runs at once; hosts are started for the cap's ceiling. "
            "A host that dies fails (and retries) only its own rollouts. Hosts (~150 MB each) "
            "are capped at 2 per CPU within half of each node's memory; past that each takes "
            "more rollouts, with a warning that gives the sums."
        ),
    )
    sandbox_starts_per_s: float = field(
        default=0.0,
        metadata=_about(
            "Sandboxes created a second at most, across the fleet (every host draws from "
            "one bucket per backend before a rollout's sandbox starts). Cloud backends cap "
            "creation (Modal: about 5 a second a workspace). Default 0: no limit, as the local "
            "sandbox needs none.",
            flag="--sandbox-start-rate",
        ),
    )
    journal: JournalMode = field(
        default="flush",
        metadata=_about(
            "Each rollout host appends every recorded turn to a journal "
            "(<out>/journal/<host>.journal) on its node before the reply reaches the agent; when "
            "a host dies, its rollouts become `infra_lost` rows with those turns, marked "
            "`partial`. `flush` (default): each turn is in the kernel first (survives the host "
            "process), `fsync`: on the disk first (survives the node's OS too; costs each call "
            "the disk's flush: docs/performance.md), `off`: no journal (a dead host's rows have "
            "no turns)."
        ),
    )
    train_partial: bool = field(
        default=False,
        metadata=_about(
            "Mark partial rows (a dead host's rollouts, rebuilt "
            "from its journal) `trainable`. Default: they are not; "
            "they have no reward either."
        ),
    )
    warm_pool: Mapping[str, int] = field(
        default_factory=dict,
        metadata=_about(
            "TASK=N (repeatable; in YAML a map): each rollout host keeps N sandboxes of task "
            "TASK (its name as in the rows' `task` column) started ahead of its rollouts, which "
            "take one instead of starting their own. The local and container sandboxes only. A "
            "pool fills once the host's first rollout of TASK has shown what its sandbox holds; "
            "its starts draw on the sandbox start rate; the host stops what it holds when it "
            "ends, and the reaper what a dead host's pool left. Default: none."
        ),
    )
    retries: int = field(
        default=1,
        metadata=_about("Retries of a rollout lost to infrastructure (infra_lost, sandbox_start)."),
    )
    grace_s: float = field(
        default=60.0,
        metadata=_about(
            "Seconds past a rollout's deadline before it is cancelled on its host, and "
            "again before its host is killed for ignoring the cancellation.",
            flag="--grace",
        ),
    )

    def __post_init__(self) -> None:
        for name in ("concurrency", "min_concurrency", "rollouts_per_host"):
            if getattr(self, name) < 1:
                raise StartError(f"{_named(name)} must be at least 1")
        if self.sandbox_starts_per_s < 0:
            raise StartError(f"{_named('sandbox_starts_per_s')} cannot be negative (0: no limit)")
        self.admission  # noqa: B018  # its own check names the fields in order
        if self.max_concurrency is not None and not self.engine_metrics:
            raise StartError(
                f"{_named('max_concurrency')} needs the engines' metrics: "
                f"{_named('engine_metrics')}, or a sweep's --llm-url"
            )
        if self.metrics_every_s <= 0:
            raise StartError(f"{_named('metrics_every_s')} must be positive")
        if self.retries < 0:
            raise StartError(f"{_named('retries')} cannot be negative: 0 tries each rollout once")
        if self.grace_s <= 0:
            raise StartError(f"{_named('grace_s')} must be positive")
        if self.journal not in get_args(JournalMode):
            raise StartError(
                f"{_named('journal')} must be one of "
                f"{', '.join(get_args(JournalMode))}, not {self.journal!r}"
            )
        if negative := sorted(task for task, n in self.warm_pool.items() if n < 0):
            raise StartError(
                f"{_named('warm_pool')} cannot keep fewer than 0 sandboxes "
                f"(tasks {', '.join(negative)})"
            )

    @property
    def ceiling(self) -> int:
        """The most rollouts ever in flight."""
        return self.max_concurrency or self.concurrency

    @property
    def admission(self) -> AdmissionPolicy | None:
        """The adaptive cap's policy; None for a fixed cap."""
        if self.max_concurrency is None:
            return None
        return AdmissionPolicy(
            floor=self.min_concurrency,
            ceiling=self.max_concurrency,
            start=self.concurrency,
            names=(_named("min_concurrency"), _named("concurrency"), _named("max_concurrency")),
        )

    @property
    def start_rate(self) -> StartRate | None:
        """The fleet's sandbox start rate; None: no limit."""
        return StartRate.of(self.sandbox_starts_per_s)

    @property
    def retry_policy(self) -> RetryPolicy:
        from harbor_ray.cluster.runner import RetryPolicy  # Ray's, for the driver only

        return RetryPolicy(retries=self.retries, grace_s=self.grace_s)


_FIELDS = {f.name: f for f in dataclasses.fields(FleetSettings)}


def fleet_flag(name: str) -> str:
    """The command-line flag of setting `name` (its YAML key is `name` itself)."""
    return _FIELDS[name].metadata["flag"] or "--" + name.replace("_", "-")


def _named(name: str) -> str:
    """Setting `name` as a refusal names it: its YAML key and its flag."""
    return f"{name} ({fleet_flag(name)})"


def fleet_help(name: str) -> str:
    """The description of setting `name`: the CLI's help and the YAML schema's."""
    help: str = _FIELDS[name].metadata["help"]
    return help


def settings_of(settings: FleetSettings) -> dict[str, Any]:
    """The fleet settings of `settings` (of any surface that holds them) as plain values,
    for a manifest: every field, none copied out by hand."""
    return {name: _plain(getattr(settings, name)) for name in _FIELDS}


def fleet_fields(settings: FleetSettings) -> dict[str, Any]:
    """The fleet settings of `settings` as keyword arguments, to make another surface's
    record (a sweep's driver config from its request) carry the same ones."""
    return {name: getattr(settings, name) for name in _FIELDS}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    return list(value) if isinstance(value, tuple) else value


def sized_for_nodes[S: FleetSettings](
    settings: S, *, setting: str, warn: Callable[[str], None]
) -> S:
    """`settings` with `rollouts_per_host` raised where the live nodes cannot hold the
    hosts the ceiling needs (host_sizing.py); `warn` hears why, naming the setting as
    its surface spells it (`setting`: the flag or the YAML field)."""
    from harbor_ray.cluster.nodes import host_plan  # reads the live Ray nodes

    plan = host_plan(settings.ceiling, settings.rollouts_per_host, setting=setting)
    if plan.warning is not None:
        warn(plan.warning)
    return dataclasses.replace(settings, rollouts_per_host=plan.rollouts_per_host)
