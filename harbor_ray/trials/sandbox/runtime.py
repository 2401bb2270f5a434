"""A running sandbox: one long-lived bwrap per trial, and the commands that enter it.

pid 1 of the sandbox is a tiny init started by bwrap, and every command joins its
namespaces through `nsenter`, so agents keep state between commands; stop() kills the
whole pid namespace, whatever its processes did. Commands write their output to files,
not pipes. Why: docs/sandbox.md, "The sandbox's runtime".

A sandbox with limits (limits.py) puts pid 1's bwrap and every command's nsenter in its
cgroups before they exec, and removes the groups once its processes are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import IO

from harbor_ray.errors import ExecTimeoutError, SandboxError
from harbor_ray.trials.sandbox.layout import (
    READY_LINE,
    SANDBOX_PATH,
    Layout,
    enter_argv,
    init_argv,
    overlay_argv,
    prepare_root,
)
from harbor_ray.trials.sandbox.limits import Cgroups
from harbor_ray.trials.sandbox.preflight import HostTools
from harbor_ray.trials.sandbox.processes import (
    kill_descendants,
    kill_pid_namespace,
    kill_tree,
    pids_in_pid_namespace,
)

__all__ = ["ExecTimeoutError", "Sandbox", "SandboxError", "to_the_end"]

# How long stop() waits for the kernel to finish killing the pid namespace.
_TEARDOWN_TIMEOUT_SEC = 10.0
_TEARDOWN_POLL_SEC = 0.02
# How long a host-side process (bwrap, nsenter) gets to exit once its child is dead.
_REAP_GRACE_SEC = 5.0

_Stream = IO[bytes] | int


class Sandbox:
    """The namespaces of one trial, held open by a pid 1, and a way to run commands in them.

    The pid 1 dies with the thread that called `start()` (bwrap's `--die-with-parent`),
    so start it from a thread that lives as long as the trial, e.g. the event loop's.
    """

    def __init__(self, tools: HostTools, layout: Layout) -> None:
        self._tools = tools
        self._layout = layout
        self._bwrap: asyncio.subprocess.Process | None = None
        self._init_pid: int | None = None
        self._pid_namespace: int | None = None
        # An open /proc/PID/ns/pid of pid 1, until stop() is done: it keeps the
        # namespace's number from going to another namespace (numbers are reused once
        # a namespace is freed), so that stop() never kills by a number that moved on.
        self._namespace_fd: int | None = None
        self._commands: dict[int, asyncio.subprocess.Process] = {}
        self._cgroups = Cgroups(layout.root, layout.limits)

    @property
    def running(self) -> bool:
        return (
            self._init_pid is not None
            and self._bwrap is not None
            and self._bwrap.returncode is None
        )

    async def start(self) -> None:
        """Lay out the root, make the cgroups, start pid 1, and return once commands can
        enter."""
        prepare_root(self._layout)
        self._cgroups.create()
        # Never cut short between bwrap's start and its report of pid 1: the loop would
        # SIGKILL a bwrap whose start it cancels, and closing the report's pipe early
        # kills it (SIGPIPE), both perhaps after it cloned pid 1, which then waits for
        # bwrap for ever (for its uid map), outside bwrap's tree and unknown to us.
        # bwrap reports as soon as it cloned, so this wait is short.
        await to_the_end(self._spawn())
        assert self._bwrap is not None
        assert self._bwrap.stdout is not None and self._bwrap.stderr is not None
        ready = await self._bwrap.stdout.readline()
        if self._pid_namespace is None or ready != READY_LINE:
            code = await self._bwrap.wait()
            stderr = (await self._bwrap.stderr.read()).decode(errors="replace").strip()
            raise SandboxError(f"bwrap exited with {code} before the sandbox was up: {stderr}")

    async def _spawn(self) -> None:
        """Start bwrap and learn its pid 1 and pid namespace (from `--info-fd`)."""
        info_read, info_write = os.pipe()
        try:
            self._bwrap = await asyncio.create_subprocess_exec(
                *self._init_argv(info_write),
                pass_fds=(info_write,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": SANDBOX_PATH},
                start_new_session=True,
            )
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        info = await _read_to_end(info_read)
        if not info:
            return  # bwrap failed before it cloned: start() says why
        # bwrap reports its child, which is the sandbox's pid 1 (`--as-pid-1`).
        details = json.loads(info)
        self._init_pid = int(details["child-pid"])
        try:
            self._namespace_fd = os.open(f"/proc/{self._init_pid}/ns/pid", os.O_RDONLY)
        except OSError as exc:
            raise SandboxError(f"the sandbox's pid 1 died starting: {exc}") from exc
        namespace = os.fstat(self._namespace_fd).st_ino
        if namespace != int(details["pid-namespace"]):
            raise SandboxError(f"the sandbox's pid 1 ({self._init_pid}) died starting")
        self._pid_namespace = namespace

    def _init_argv(self, info_fd: int) -> list[str]:
        """bwrap's command line, through the mount of the overlay over an image, by a
        process that first joins the cgroups."""
        argv = init_argv(self._tools.bwrap, self._layout, info_fd=info_fd)
        if self._layout.image_root is not None:
            unshare, mount = self._tools.unshare, self._tools.mount
            assert unshare is not None and mount is not None  # find_tools(image=True)
            argv = overlay_argv(unshare, mount, self._layout, argv)
        return self._cgroups.join_argv(argv)

    async def run(
        self,
        command: Sequence[str],
        *,
        cwd: PurePosixPath,
        env: Mapping[str, str],
        stdin: _Stream = subprocess.DEVNULL,
        stdout: _Stream,
        stderr: _Stream,
        timeout_sec: float | None = None,
    ) -> int:
        """Run `command` inside with exactly `env`; return its exit status.

        On timeout or cancellation the command's whole process tree is killed before
        `ExecTimeoutError` or the cancellation propagates.
        """
        if not self.running:
            raise SandboxError("the sandbox is not running")
        assert self._init_pid is not None
        process = await asyncio.create_subprocess_exec(
            *self._cgroups.join_argv(enter_argv(self._tools.nsenter, self._init_pid, cwd, command)),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
            start_new_session=True,
        )
        self._commands[process.pid] = process
        try:
            async with asyncio.timeout(timeout_sec):
                return await process.wait()
        except TimeoutError:
            await _kill(process)
            raise ExecTimeoutError(f"Command timed out after {timeout_sec} seconds") from None
        except asyncio.CancelledError:
            await _kill(process)
            raise
        finally:
            del self._commands[process.pid]

    async def stop(self) -> None:
        """Kill every process of the sandbox and wait until none is left. Idempotent.

        By pid namespace: every process in it gets SIGKILL from the host (the one signal
        its pid 1 cannot ignore), whether bwrap still runs or not; pid 1's death makes
        the kernel kill anything forked meanwhile. A start cut short before bwrap said
        which namespace: bwrap and whatever it started are killed instead. The cgroups go
        last, once nothing is left in them.
        """
        if self._bwrap is not None:
            await self._end_processes(self._bwrap)
        self._cgroups.remove()

    async def _end_processes(self, bwrap: asyncio.subprocess.Process) -> None:
        if self._pid_namespace is not None:
            kill_pid_namespace(self._pid_namespace)
        elif bwrap.returncode is None:
            kill_tree(bwrap.pid)
        # bwrap and the commands' nsenters each wait for their child in the sandbox, now
        # dead, and exit. Waiting for them means no nsenter of ours is left to enter
        # anything once stop() returns.
        await asyncio.gather(*(_reap(p) for p in (bwrap, *self._commands.values())))
        if self._pid_namespace is not None:
            await _wait_until_empty(self._pid_namespace)
        if self._namespace_fd is not None:
            os.close(self._namespace_fd)
            self._namespace_fd = None
        self._init_pid = self._pid_namespace = None


async def to_the_end[T](work: Awaitable[T]) -> T:
    """Await `work` until it ends, even if the caller is cancelled meanwhile; then raise
    that cancellation."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            cancelled = exc
    try:
        return task.result()
    finally:
        if cancelled is not None:
            raise cancelled


async def _read_to_end(fd: int) -> bytes:
    """Read a pipe until EOF without blocking the event loop, then close it (once).

    Not with `loop.connect_read_pipe`: under uvloop (a Ray actor's loop) the transport
    closes the descriptor and so does the file object it was given, the second time
    after the number may have gone to another file of the process (uvloop#763; on
    cancellation, whenever the file object is collected). A rollout host then had its
    log files or Ray's own sockets closed under it: "Bad file descriptor", then an abort.
    Here the loop only watches the descriptor, and this function alone closes it.
    """
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    try:
        os.set_blocking(fd, False)
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                readable = loop.create_future()
                loop.add_reader(fd, _set_once, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(fd)
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill a command's tree inside the sandbox; its nsenter then exits by itself."""
    kill_descendants(process.pid)
    await _reap(process)


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Wait for a process that is about to exit; SIGKILL it if it does not in time."""
    try:
        async with asyncio.timeout(_REAP_GRACE_SEC):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def _wait_until_empty(namespace: int) -> None:
    deadline = time.monotonic() + _TEARDOWN_TIMEOUT_SEC
    while survivors := pids_in_pid_namespace(namespace):
        if time.monotonic() > deadline:
            raise SandboxError(f"processes {survivors} survived the sandbox's teardown")
        await asyncio.sleep(_TEARDOWN_POLL_SEC)
