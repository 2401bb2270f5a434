"""The local sandbox's side of a warm pool (trials/warm_pool.py): bwrap sandboxes started
before their trial, and handed to it when its environment starts.

A sandbox is what a `Recipe` makes: the host tools, the binds (tools, runtimes, the
task's own mounts), the workdir, the network, the forwards, and for the container sandbox
the image's root filesystem and the task's limits; nothing of the trial's.
Harbor builds each trial's `BwrapEnvironment` with that trial's paths, but without
`auto_mounting` (the default) none of them is bound into the sandbox: Harbor downloads
/logs/agent and /logs/verifier into the trial directory once the agent and the verifier
ran, so a sandbox started for no trial serves any trial of its recipe.

- `launch` is a sandbox's start, the same for a trial's own and a pooled one.
- `BwrapBackend` is the pool's `SandboxBackend`: it learns an environment's recipe from
  the first trial that asks (`learn`), starts sandboxes of it in the host's sandboxes
  directory, and stops one the ledger names by its directory (`reap_sandbox`).
- `register_pool` names a host's pool in its process: a trial's environment, built by
  Harbor from plain kwargs, finds it by that name (`take`).
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harbor_ray.errors import SandboxSetupError
from harbor_ray.trials.sandbox.forward import Forward, Forwarding
from harbor_ray.trials.sandbox.layout import Bind, Layout, remove_root
from harbor_ray.trials.sandbox.leftovers import reap_sandbox
from harbor_ray.trials.sandbox.limits import Limits
from harbor_ray.trials.sandbox.preflight import find_tools
from harbor_ray.trials.sandbox.runtime import Sandbox, to_the_end
from harbor_ray.trials.warm_pool import WarmPool

__all__ = [
    "BwrapBackend",
    "Recipe",
    "Started",
    "Taken",
    "launch",
    "register_pool",
    "take",
    "unregister_pool",
]

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """Everything a started sandbox is made of; two trials with equal recipes can use
    each other's (never one over another image: `image_root` is the one it is over)."""

    search_path: str | None
    workdir: PurePosixPath
    share_network: bool
    binds: tuple[Bind, ...]
    forwards: tuple[Forward, ...]
    image_root: Path | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass
class Started:
    """A running sandbox: its pid 1, its forwards' host half, its `/` on the host."""

    directory: Path
    sandbox: Sandbox
    forwarding: Forwarding

    @property
    def sandbox_id(self) -> str:
        """Its directory's name: what a warm pool's ledger keeps, and all a reaper needs
        (the directory is under the host's sandboxes directory)."""
        return self.directory.name

    async def stop(self, delete: bool = True) -> None:
        """Kill every process, end the forwards, remove the directory (kept with
        `delete=False`). Runs to its end even if the caller is cancelled: a teardown cut
        short leaves a sandbox nobody owns. A process that survives keeps the directory
        (with the error) for the reaper."""
        await to_the_end(self._stop(delete))

    async def _stop(self, delete: bool) -> None:
        try:
            await self.sandbox.stop()
        finally:
            await self.forwarding.close()
        if delete:
            remove_root(self.directory)


async def launch(
    recipe: Recipe, sandboxes_dir: Path | None, name: str, logger: logging.Logger
) -> Started:
    """Start a sandbox of `recipe` in a fresh directory under `sandboxes_dir` (named
    after `name`), with its forwards up: commands can run in it."""
    tools = find_tools(recipe.search_path, image=recipe.image_root is not None)
    if sandboxes_dir is not None:
        sandboxes_dir.mkdir(parents=True, exist_ok=True)
    prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] + "-"
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=sandboxes_dir))
    forwarding = Forwarding(() if recipe.share_network else recipe.forwards, logger)
    # The sandbox is made once the forwards' sockets exist (bwrap binds their directory).
    started = Started(directory, Sandbox(tools, Layout(root=directory)), forwarding)
    try:
        await forwarding.open()
        started.sandbox = Sandbox(
            tools,
            Layout(
                root=directory,
                workdir=recipe.workdir,
                share_network=recipe.share_network,
                binds=recipe.binds + forwarding.binds,
                image_root=recipe.image_root,
                limits=recipe.limits,
            ),
        )
        await started.sandbox.start()
        await forwarding.start_inside(started.sandbox)
    except BaseException:
        await started.stop()
        raise
    return started


class BwrapBackend:
    """The warm pool's backend for the local sandbox, on one host's sandboxes directory."""

    def __init__(self, sandboxes_dir: Path) -> None:
        self.sandboxes_dir = sandboxes_dir
        self._recipes: dict[str, Recipe] = {}

    def learn(self, environment: str, recipe: Recipe) -> bool:
        """Whether `environment`'s pooled sandboxes are made from `recipe`: the first
        recipe learned for it is kept, and a trial whose recipe differs (another agent's
        tools) starts its own."""
        return self._recipes.setdefault(environment, recipe) == recipe

    async def start(self, environment: str) -> Started:
        return await launch(
            self._recipes[environment], self.sandboxes_dir, f"pool-{environment}", _LOGGER
        )

    async def stop(self, sandbox: Started) -> None:
        await sandbox.stop()

    async def stop_id(self, sandbox_id: str) -> None:
        reap_sandbox(self.sandboxes_dir / sandbox_id)


# The warm pools of this process (a rollout host's), by name: a trial's environment
# kwargs can carry a name, not a pool.
_POOLS: dict[str, tuple[WarmPool[Started], BwrapBackend]] = {}


def register_pool(name: str, pool: WarmPool[Started], backend: BwrapBackend) -> None:
    _POOLS[name] = (pool, backend)


def unregister_pool(name: str) -> None:
    _POOLS.pop(name, None)


@dataclass(frozen=True)
class Taken:
    """A sandbox a trial got through a warm pool, and the pool it goes back to."""

    pool: WarmPool[Started]
    sandbox: Started
    was_ready: bool  # started ahead of the trial, rather than for it when none was


async def take(name: str, environment: str, recipe: Recipe) -> Taken | None:
    """A started sandbox of `environment` from pool `name`; None when the pool's
    sandboxes of it are made from another recipe."""
    if name not in _POOLS:
        raise SandboxSetupError(
            f"no warm pool {name!r} runs in this process: a warm "
            "pool is a rollout host's (harbor-ray sweep --warm-pool)"
        )
    pool, backend = _POOLS[name]
    if not backend.learn(environment, recipe):
        return None
    pool.open_environment(environment)
    was_ready = pool.ready(environment) > 0
    return Taken(pool, await pool.take(environment), was_ready)
