"""The Docker CLI as images are built with it (trials/images.py): each command or
pipeline run to its end under one caller's deadline, its output appended to a log and
quoted on failure; an image's id and config as the daemon reports them; a lock file per
image key; and why Docker cannot be used here, each reason naming its fix.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from harbor_ray.errors import EnvironmentBuildError

__all__ = ["DockerCli", "docker_problems"]

_TAIL_LINES = 12
# `docker image inspect`, `docker rm` and the daemon probe answer in well under a
# second when the daemon is healthy; vfs makes a busy one slow, not this slow.
_QUERY_TIMEOUT_S = 60.0
_PROBE_TIMEOUT_S = 10.0
# The legacy builder: the Debian daemon has no BuildKit front end for the CLI to use.
_DOCKER_ENV = {"DOCKER_BUILDKIT": "0"}
_LEGACY_NOTICE = "DEPRECATED: The legacy builder is deprecated"
_START_DOCKERD = (
    "start it as root: `dockerd --storage-driver=vfs --iptables=false "
    "--bridge=none &` (scripts/container_host.sh does)"
)


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    """The last lines of a command's output, indented for quoting in a message.

    The CLI's notice that the legacy builder (our choice) is deprecated is left out:
    quoted beside a failure, it reads like its cause.
    """
    kept: list[str] = []
    in_notice = False
    for line in text.splitlines():
        in_notice = line.startswith(_LEGACY_NOTICE) or (in_notice and line[:1].isspace())
        if line.strip() and not in_notice:
            kept.append(line)
    return "\n".join(f"  | {line}" for line in kept[-lines:]) or "  | (no output)"


def docker_problems(docker: str = "docker") -> list[str]:
    """Why images cannot be built here, each naming the fix ([] when they can): the
    CLI missing, the daemon not answering `docker version` in a few seconds."""
    problems = []
    if shutil.which("tar") is None:
        problems.append("`tar` not found on PATH: install the Debian package `tar`.")
    path = shutil.which(docker)
    if path is None:
        return [
            *problems,
            f"`{docker}` not found on PATH: install Debian's `docker.io` "
            "(apt-get install docker.io; scripts/container_host.sh does).",
        ]
    try:
        result = subprocess.run(
            [path, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [
            *problems,
            f"the Docker daemon did not answer `{docker} version` within "
            f"{_PROBE_TIMEOUT_S:g} s: restart it, or {_START_DOCKERD}.",
        ]
    if result.returncode != 0:
        said = " ".join((result.stderr or result.stdout).split())
        return [
            *problems,
            f"the Docker daemon does not answer `{docker} version` "
            f"({said}): {_START_DOCKERD}; a user other than root needs "
            "access to its socket (the `docker` group).",
        ]
    return problems


@dataclass
class DockerCli:
    """One caller's Docker commands, under its one deadline (none when `deadline` is
    None); `progress` hears what is slow (a wait on another build's lock, a container
    left behind)."""

    docker: str
    progress: Callable[[str], None]
    timeout_s: float | None
    deadline: float | None

    def remaining(self, cap: float | None = None) -> float | None:
        if self.deadline is None:
            return cap
        left = max(self.deadline - time.monotonic(), 0.0)
        return left if cap is None else min(left, cap)

    @contextmanager
    def locked(self, path: Path, what: str) -> Iterator[None]:
        with path.open("a") as lock:  # closing it releases the lock
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.progress(f"waiting for another build of {what} on this node (lock: {path})")
                self._wait(lock, path, what)
            yield

    def _wait(self, lock: IO[str], path: Path, what: str) -> None:
        if self.deadline is None:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return
        # flock has no timeout: poll, so a build that outlives our deadline cannot
        # keep us waiting past it.
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= self.deadline:
                    raise EnvironmentBuildError(
                        f"{what}: another build on this node still held {path} "
                        f"after the {self.timeout_s:g} s allowed"
                    ) from None
                time.sleep(0.1)

    def image_id(self, reference: str) -> str | None:
        """The daemon's id of `reference`; None when it does not hold it."""
        found = self.inspect(reference, "{{.Id}}")
        return None if found is None else found.strip()

    def inspect(self, reference: str, template: str) -> str | None:
        """`docker image inspect --format template reference`'s output; None when the
        daemon does not hold it."""
        argv = [self.docker, "image", "inspect", "--format", template, reference]
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **_DOCKER_ENV},
                timeout=self.remaining(_QUERY_TIMEOUT_S),
            )
        except subprocess.TimeoutExpired as exc:
            raise EnvironmentBuildError(
                f"`{shlex.join(argv)}` did not answer within {exc.timeout:g} s"
            ) from exc
        except OSError as exc:
            raise EnvironmentBuildError(
                f"`{shlex.join(argv)}` could not run ({exc}): "
                f"{' '.join(docker_problems(self.docker))}"
            ) from exc
        if result.returncode == 0:
            return result.stdout
        if "no such image" in result.stderr.lower():
            return None
        raise EnvironmentBuildError(
            f"`{shlex.join(argv)}` failed (exit {result.returncode}):\n{_tail(result.stderr)}"
            f"\n{' '.join(docker_problems(self.docker))}"
        )

    def remove(self, container: str) -> None:
        """Remove a container, whatever became of what it was made for. One left behind
        (the daemon too slow to answer) costs disk only: said, not raised."""
        argv = [self.docker, "rm", "-f", container]
        try:
            subprocess.run(
                argv,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=_QUERY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.progress(
                f"could not remove container {container} ({exc}): `{shlex.join(argv)}` removes it"
            )

    def step(self, commands: list[list[str]], log: Path | None, what: str, fix: str = "") -> None:
        """Run a command (or a pipeline) to its end, its output appended to `log` (to a
        scratch file when there is none) under a line naming it, then one saying how it
        ended; an EnvironmentBuildError quoting that output if it failed or timed out."""
        line = " | ".join(shlex.join(argv) for argv in commands)
        with log.open("ab+") if log is not None else tempfile.TemporaryFile() as out:
            out.write(f"$ {line}  # {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode())
            out.flush()
            start, began = out.tell(), time.monotonic()
            failure: str | None = None
            try:
                codes = _pipeline(commands, out, self.remaining())
                ended = f"exit {' '.join(map(str, codes))}"
                if any(codes):
                    failure = f"failed ({ended})"
            except subprocess.TimeoutExpired:
                ended = "killed: over its time"
                failure = f"took longer than the {self.timeout_s:g} s allowed and was killed"
            except OSError as exc:
                ended = failure = f"could not start ({exc})"
            out.seek(start)
            output = out.read().decode(errors="replace")
            out.seek(0, os.SEEK_END)
            out.write(f"# {ended} after {time.monotonic() - began:.1f} s\n".encode())
        if failure is not None:
            where = "" if log is None else f" (log: {log})"
            raise EnvironmentBuildError(
                f"{what} {failure}{where}; its last lines:\n{_tail(output)}"
                + (f"\n{fix}" if fix else ""),
                log=None if log is None else str(log),
            )


def _pipeline(commands: list[list[str]], out: IO[bytes], timeout: float | None) -> list[int]:
    """Each command's exit status, each one's stdout feeding the next, the last one's and
    every stderr into `out`. Past `timeout` every process is killed (TimeoutExpired)."""
    env = {**os.environ, **_DOCKER_ENV}
    deadline = None if timeout is None else time.monotonic() + timeout
    processes: list[subprocess.Popen[bytes]] = []
    feed: IO[bytes] | int = subprocess.DEVNULL
    try:
        for index, argv in enumerate(commands):
            last = index == len(commands) - 1
            process = subprocess.Popen(
                argv, stdin=feed, stderr=out, env=env, stdout=out if last else subprocess.PIPE
            )
            if not isinstance(feed, int):
                feed.close()  # the next command holds it now
            processes.append(process)
            if process.stdout is not None:
                feed = process.stdout
        return [
            process.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            for process in processes
        ]
    finally:
        if not isinstance(feed, int):
            feed.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
