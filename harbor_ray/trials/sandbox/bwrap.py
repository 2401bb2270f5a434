"""A Harbor environment that runs each trial in a bubblewrap sandbox on this machine.

Plug it in with `EnvironmentConfig(import_path="harbor_ray.trials.sandbox.bwrap:
BwrapEnvironment", kwargs={...})`; the kwargs are `BwrapEnvironment`'s (`share_network`,
`forward`, `runtimes`, `sandboxes_dir`, `search_path`, `tools`). A trial gets its own writable `/`,
the host's userland read-only, no network unless allowed, and one pid namespace whose
teardown kills all of it; files move through `tar`/`cat` inside the sandbox, never a
host-side copy. The whole contract: docs/sandbox.md, "The bubblewrap sandbox".

Its start writes the trial directory's `environment.json`, `{"kind": "host"}`: the
rollout's row says the task ran on the host's userland (the container sandbox,
container.py, writes its image there instead).
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from harbor.environments.base import BaseEnvironment, ExecResult, transfer_tar_filter
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.environments.definition import COMPOSE_FILE_NAME, DOCKERFILE_NAME
from harbor.models.task.config import EnvironmentConfig, NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

from harbor_ray.errors import SandboxError, SandboxSetupError
from harbor_ray.trials.environment_need import uploads_environment_dir
from harbor_ray.trials.sandbox.forward import parse_forwards
from harbor_ray.trials.sandbox.layout import (
    DEFAULT_WORKDIR,
    SANDBOX_PATH,
    Bind,
    tool_binds,
    tools_path,
)
from harbor_ray.trials.sandbox.pooled import Recipe, Started, launch, take
from harbor_ray.trials.sandbox.preflight import find_problems
from harbor_ray.trials.sandbox.runtime import Sandbox, to_the_end
from harbor_ray.trials.warm_pool import WarmPool

__all__ = ["BwrapEnvironment", "shares_host_network"]

ENVIRONMENT_TYPE = "bwrap"
# In the trial's directory: what its sandbox ran it on (the rollout's row reads it).
ENVIRONMENT_FILE = "environment.json"

# What a command sees before the task's and the caller's variables: nothing from the
# host process (it holds API keys and host-only paths). TMUX_TMPDIR points tmux at the
# trial's own /tmp, so trials never share a tmux server.
_BASE_ENV = {
    "PATH": SANDBOX_PATH,
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "LANG": "C.UTF-8",
    "TMUX_TMPDIR": "/tmp",
}
_ROOT_USERS = (None, 0, "0", "root")


def shares_host_network(
    policy: NetworkPolicy, task_env_config: EnvironmentConfig, requested: bool
) -> bool:
    """Whether the sandbox joins the host's network namespace.

    Harbor's policy defaults to public for every task that says nothing, and the host
    network includes the host's loopback services (the capture proxy, Ray), so public
    is taken only when asked for: by the task (`network_mode = "public"`, or the
    deprecated `allow_internet = true`, in task.toml) or by the `share_network` kwarg.
    A task that forbids the network is never overridden.
    """
    if policy.network_mode != NetworkMode.PUBLIC:
        return False
    return requested or "network_mode" in task_env_config.model_fields_set


def _shell_status(code: int) -> int:
    """An exit status as a shell and `docker exec` report it: 128 + N for a command
    killed by signal N (which Python reports as -N). Harbor's adapters match on it:
    kimi-cli's ends its own process group (`kill 0`) and takes exit 143 for success."""
    return 128 - code if code < 0 else code


class BwrapEnvironment(BaseEnvironment):
    """One trial's bubblewrap sandbox (see the module docstring)."""

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        session_id: str,
        trial_paths: TrialPaths,
        task_env_config: EnvironmentConfig,
        logger: logging.Logger | None = None,
        *,
        share_network: bool = False,
        forward: Mapping[int | str, str] | None = None,
        sandboxes_dir: str | Path | None = None,
        search_path: str | None = None,
        tools: Mapping[str, str] | None = None,
        runtimes: Mapping[str, str] | None = None,
        warm_pool: str | None = None,
        warm_pool_environment: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._share_network = share_network
        self._forwards = parse_forwards(forward or {})
        self._sandboxes_dir = Path(sandboxes_dir) if sandboxes_dir is not None else None
        self._search_path = search_path
        self._tools = tool_binds(tools or {})
        self._env = {**_BASE_ENV, "PATH": tools_path(self._tools)}
        # Read-only like tools, but off PATH: an interpreter a tool's venv names by its
        # absolute path (installs.sandbox_runtimes), which must not shadow the host's.
        self._runtimes = tool_binds(runtimes or {})
        # A rollout host's warm pool (pooled.py) the sandbox is taken from, by name, and
        # the environment it is pooled under there.
        self._warm_pool = warm_pool
        self._warm_pool_environment = warm_pool_environment or environment_name
        self._started: Started | None = None
        self._pool: WarmPool[Started] | None = None  # where a pooled sandbox goes back
        super().__init__(
            environment_dir=environment_dir,
            environment_name=environment_name,
            session_id=session_id,
            trial_paths=trial_paths,
            task_env_config=task_env_config,
            logger=logger,
            **kwargs,
        )

    @staticmethod
    def type() -> str:
        return ENVIRONMENT_TYPE

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # mounted: Harbor's mounts (and, with auto_mounting, the trial's log dirs) are
        # bound into the sandbox, so Harbor reads logs in place instead of downloading.
        return EnvironmentCapabilities(disable_internet=True, mounted=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        # No CPU or memory limits are enforced; requests for them are refused by Harbor.
        return EnvironmentResourceCapabilities(fractional_cpus=True)

    @classmethod
    def preflight(cls) -> None:
        """Harbor's hook: SystemExit naming every missing piece (see preflight.py)."""
        problems = find_problems()
        if problems:
            raise SystemExit("The bwrap sandbox cannot run here:\n" + "\n".join(problems))

    @property
    def sandbox_dir(self) -> Path | None:
        """The host directory that is the sandbox's `/`, while it exists."""
        return None if self._started is None else self._started.directory

    @property
    def pooled(self) -> bool:
        """Whether the running sandbox came from a warm pool."""
        return self._pool is not None

    @property
    def workdir(self) -> PurePosixPath:
        workdir = self.task_env_config.workdir
        return PurePosixPath(workdir) if workdir else DEFAULT_WORKDIR

    def _validate_definition(self) -> None:
        if (self.environment_dir / COMPOSE_FILE_NAME).exists():
            raise SandboxSetupError(
                f"{COMPOSE_FILE_NAME} tasks need a container engine: the bwrap sandbox "
                "runs a single environment on the host's userland: use a container backend."
            )
        self._validate_mounts()

    def _validate_mounts(self) -> None:
        for mount in self._host_mounts:
            if mount["type"] != "bind":
                raise SandboxSetupError(
                    f"The bwrap sandbox supports bind mounts only, not {mount['type']!r} "
                    f"(target {mount['target']})."
                )

    @property
    def _shares_network(self) -> bool:
        return shares_host_network(self.network_policy, self.task_env_config, self._share_network)

    def forward_url(self, port: int) -> str:
        """The base URL at which commands inside reach the host address forwarded from `port`.

        On the host's network (see `shares_host_network`) no relay is needed, and the
        URL is the host address itself.
        """
        for forward in self._forwards:
            if forward.port == port:
                return forward.target_url if self._shares_network else forward.sandbox_url
        forwarded = [forward.port for forward in self._forwards]
        raise SandboxSetupError(
            f"sandbox port {port} is not forwarded (forwarded: {forwarded}): "
            "add it to the sandbox's forward mapping"
        )

    def _recipe(self) -> Recipe:
        binds = tuple(
            Bind(
                source=Path(mount["source"]),
                target=PurePosixPath(mount["target"]),
                read_only=bool(mount.get("read_only")),
            )
            for mount in self._host_mounts
        )
        return Recipe(
            search_path=self._search_path,
            workdir=self.workdir,
            share_network=self._shares_network,
            binds=binds + self._tools + self._runtimes,
            forwards=self._forwards,
        )

    async def start(self, force_build: bool) -> None:
        self._check_not_started()
        if (self.environment_dir / DOCKERFILE_NAME).exists() or self.task_env_config.docker_image:
            self.logger.warning(
                "The bwrap sandbox does not build the task's Dockerfile or pull its "
                "image; the task runs on the host's /usr (harbor_ray refuses a task that "
                "needs its image here, unless asked: --host-userland)."
            )
        await self._start_sandbox({"kind": "host"})

    def _check_not_started(self) -> None:
        if self._started is not None:
            raise SandboxError("the sandbox was already started")

    async def _start_sandbox(self, environment: Mapping[str, object]) -> None:
        """Start the sandbox of `_recipe()` (or take one from the warm pool), then record
        `environment` (what the task ran on) in the trial directory's environment.json."""
        recipe = self._recipe()
        # With auto_mounting the trial's own log dirs are bound in: no pooled sandbox has them.
        if self._warm_pool is not None and not self.auto_mounting:
            taken = await take(self._warm_pool, self._warm_pool_environment, recipe)
            if taken is not None:
                self._pool, self._started = taken.pool, taken.sandbox
                self.logger.info(
                    f"Took sandbox {taken.sandbox.sandbox_id} from the warm pool "
                    + ("ready" if taken.was_ready else "(started for this trial: none was ready)")
                )
        if self._started is None:
            self._started = await launch(recipe, self._sandboxes_dir, self.session_id, self.logger)
        try:
            # Harbor copies environment/ in for a docker_image task without a Dockerfile;
            # harbor_ray's sandboxes also for a task that declares no image at all, whose
            # environment/ can only be its files (environment_need.py).
            if self._enable_environment_dir_upload and uploads_environment_dir(
                self.environment_dir
            ):
                await self.upload_dir(self.environment_dir, str(self.workdir))
            self.trial_paths.trial_dir.mkdir(parents=True, exist_ok=True)
            (self.trial_paths.trial_dir / ENVIRONMENT_FILE).write_text(
                json.dumps(environment) + "\n"
            )
        except BaseException:
            await self.stop(delete=True)
            raise

    async def stop(self, delete: bool) -> None:
        """Kill every process of the trial, end its forwards, remove its directory. Idempotent.

        `delete=False` (Harbor's keep-for-debugging) keeps the directory, never the
        processes, except a pooled sandbox's, which goes back to its pool (stopped and
        removed there). Runs to its end even if the caller is cancelled meanwhile (the
        cancellation then goes on): a teardown cut short leaves a sandbox nobody owns.
        The directory is removed only once no process of the sandbox is left; if one
        survives, it stays (with the error) for the reaper.
        """
        started, self._started = self._started, None
        pool, self._pool = self._pool, None
        if started is None:
            return
        if pool is not None:
            await to_the_end(pool.release(started))
            return
        await started.stop(delete)
        if not delete:
            self.logger.info(f"Kept the sandbox's directory {started.directory}")

    def _running(self) -> Sandbox:
        if self._started is None:
            raise SandboxError("the sandbox is not running")
        return self._started.sandbox

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Run `bash -c command` (not a login shell, as Harbor's Docker environment does).

        A timeout kills the command's process tree and raises `ExecTimeoutError`.
        """
        resolved = self._resolve_user(user)
        if resolved not in _ROOT_USERS:
            raise SandboxSetupError(
                f"The bwrap sandbox runs every command as root; user {resolved!r} "
                "cannot be provided (its user namespace maps a single uid)."
            )
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            code = await self._running().run(
                ["bash", "-c", command],
                cwd=PurePosixPath(cwd) if cwd else self.workdir,
                env={**self._env, **(self._merge_env(env) or {})},
                stdout=stdout,
                stderr=stderr,
                # 0 means no timeout, as for Harbor's Docker environment.
                timeout_sec=timeout_sec or None,
            )
            return ExecResult(
                stdout=_text(stdout), stderr=_text(stderr), return_code=_shell_status(code)
            )

    async def _transfer(
        self, script: str, *, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None
    ) -> None:
        """Run a file-transfer script inside, as root with the base environment only."""
        with tempfile.TemporaryFile() as discard, tempfile.TemporaryFile() as stderr:
            code = await self._running().run(
                ["bash", "-c", f"set -e; {script}"],
                cwd=PurePosixPath("/"),
                env=self._env,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout if stdout is not None else discard,
                stderr=stderr,
            )
            if code != 0:
                raise SandboxError(f"file transfer failed ({code}): {_text(stderr)}")

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = shlex.quote(target_path)
        with open(source_path, "rb") as source:
            await self._transfer(
                f'mkdir -p -- "$(dirname -- {target})"; cat > {target}', stdin=source
            )

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy the contents of `source_dir` into `target_dir` (created if missing)."""
        target = shlex.quote(target_dir)
        with tempfile.TemporaryFile() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(source_dir, arcname=".")
            archive.seek(0)
            await self._transfer(
                f"mkdir -p -- {target}; tar -x --no-same-owner -C {target} -f -",
                stdin=archive,
            )

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as content:
            await self._transfer(f"cat -- {shlex.quote(source_path)}", stdout=content)
            content.seek(0)
            with open(target, "wb") as destination:
                shutil.copyfileobj(content, destination)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy the contents of `source_dir` into `target_dir`, overwriting files.

        Entries that would land outside `target_dir` on the host (absolute symlinks,
        links climbing out) are left out, with a warning, rather than failing the copy.
        """
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        skipped: list[str] = []

        def keep_inside(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
            try:
                kept: tarfile.TarInfo | None = transfer_tar_filter(member, destination)
                return kept
            except tarfile.FilterError:
                skipped.append(member.name)
                return None

        with tempfile.TemporaryFile() as archive:
            await self._transfer(f"tar -c -C {shlex.quote(source_dir)} -f - .", stdout=archive)
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(target, filter=keep_inside)
        if skipped:
            self.logger.warning(
                f"Left out of the download of {source_dir}, as they point outside it: {skipped}"
            )


def _text(output: IO[bytes]) -> str | None:
    """A command's captured output; None when empty, as Harbor's Docker environment."""
    output.seek(0)
    data = output.read()
    return data.decode(errors="replace") if data else None
