"""What a sandbox looks like, and the command lines that build it and enter it.

Nothing here spawns a process: it lays out the per-trial host directory and builds argv
lists, so the shape of the sandbox can be read (and tested) in one place.

The sandbox's `/` is a per-trial host directory, writable. Everything Harbor and agents
write (`/app`, `/tests`, `/logs`, `/solution`, `/installed-agent`, `/tmp`, `/root`, ...)
therefore lands in that one directory, and removing it removes the trial. The host's
system directories are bound read-only on top, so the sandbox runs the host's programs
(bash, tmux, python) without being able to change them; top-level symlinks such as
`/bin -> usr/bin` are copied from the host so merged-/usr and split layouts both work.

Over an image (`Layout.image_root`, the container sandbox) the sandbox's `/` is instead an
overlay: the image's root filesystem read-only below, the per-trial directory's `upper`
above, where every write lands; nothing of the host's userland is bound. bubblewrap
cannot mount an overlay, so bwrap runs in a mount namespace of its own where one was
mounted first (`overlay_argv`): the mount exists in no other namespace, and goes with
the sandbox's last process, even when its owner is killed and nothing unmounts it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harbor_ray.errors import SandboxSetupError
from harbor_ray.trials.sandbox.limits import Limits

__all__ = [
    "DEFAULT_WORKDIR",
    "DROP_PRIVILEGES",
    "READY_LINE",
    "SANDBOX_PATH",
    "Bind",
    "Layout",
    "enter_argv",
    "init_argv",
    "init_command",
    "overlay_argv",
    "prepare_root",
    "remove_root",
    "tool_binds",
    "tools_path",
]

# PATH for everything run inside. Set explicitly: the host's PATH points at host-only
# places (pyenv shims, ~/.local/bin) that do not exist in the sandbox.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Where commands run when the task names no workdir (Harbor's convention).
DEFAULT_WORKDIR = PurePosixPath("/app")

# Host directories that hold programs and their configuration. Each is bound read-only
# when it is a directory on the host and recreated as the same symlink when it is one.
_SYSTEM_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")

# Host secrets readable by root. The sandbox's root is the host's root uid (mapped 1:1),
# so the read-only /etc would otherwise hand them to every agent.
_MASKED_FILES = ("/etc/shadow", "/etc/gshadow")
_MASKED_DIRS = ("/etc/ssh",)

# Directories Harbor hard-codes or agents expect, created so that the first command
# of a trial does not depend on who creates them.
_TRIAL_DIRS = (
    "tmp",
    "var/tmp",
    "root",
    "home",
    "run",
    "logs/agent",
    "logs/verifier",
    "logs/artifacts",
    "tests",
    "solution",
    "installed-agent",
)
_STICKY_DIRS = ("tmp", "var/tmp")

# pid 1 of the sandbox. The kernel drops every signal sent to a namespace's pid 1 from
# inside the namespace unless pid 1 handles it, so an agent's `kill -9 -1` or
# `pkill sleep` cannot tear the sandbox down; only the host can (SIGKILL from outside).
# bash reaps the orphans reparented to it (daemonised tmux servers, `cmd &` left behind).
# The loop restarts the `sleep` child if an agent kills it (a status above 128), and
# exits if `sleep` cannot run at all (126, 127: its /usr gone with a removed directory;
# a failed fork), which ends the namespace, where a loop restarting it would spin.
# "ready" tells the host that the mounts are in place and commands may enter.
_INIT_SCRIPT = (
    'trap "" HUP INT QUIT TERM; echo ready; exec </dev/null >/dev/null 2>&1; '
    "while :; do sleep 86400 & wait $! || [ $? -gt 128 ] || exit; done"
)
READY_LINE = b"ready\n"

# Run by `unshare` in the sandbox's own mount namespace: mount the overlay, then exec bwrap
# (the same process: its pid, its parent for --die-with-parent, its --info-fd stay).
_MOUNT_SCRIPT = '"$1" -t overlay overlay -o "$2" "$3" && shift 3 && exec "$@"'
# What cannot be written in an overlay's mount options (they are split on these).
_OPTION_SEPARATORS = (",", ":", "\\")

# Commands entering the sandbox join its user namespace, where they would hold every
# capability, enough to remount the read-only /usr writable. Drop them all, for good.
DROP_PRIVILEGES = (
    "/usr/bin/setpriv",
    "--bounding-set=-all",
    "--inh-caps=-all",
    "--no-new-privs",
    "--",
)


@dataclass(frozen=True)
class Bind:
    """A host directory made visible at `target` inside the sandbox."""

    source: Path
    target: PurePosixPath
    read_only: bool = False


@dataclass(frozen=True)
class Layout:
    """Everything that decides what one sandbox sees, and what it may use.

    `root` is the per-trial host directory that becomes `/` (or holds the overlay that
    does, over `image_root`: a root filesystem, read-only); `binds` are the extra host
    directories (Harbor's mounts) laid over it; `limits` are applied with cgroups.
    """

    root: Path
    workdir: PurePosixPath = DEFAULT_WORKDIR
    share_network: bool = False
    binds: tuple[Bind, ...] = ()
    image_root: Path | None = None
    limits: Limits = field(default_factory=Limits)

    @property
    def writable(self) -> Path:
        """Where the sandbox's writes land: `root`, or the overlay's upper directory."""
        return self.root if self.image_root is None else self.root / "upper"

    @property
    def scratch(self) -> Path:
        """The overlay's own work directory, on the upper one's file system."""
        return self.root / "work"

    @property
    def top(self) -> Path:
        """The host directory bwrap makes `/`: `root`, or where the overlay is mounted."""
        return self.root if self.image_root is None else self.root / "merged"


def tool_binds(tools: Mapping[str, str]) -> tuple[Bind, ...]:
    """`{sandbox dir: host dir}` of installed programs as read-only binds.

    A target must be absolute and outside the directories the host lends (its /usr is
    already there, read-only) and `/` itself; a source must be an existing directory.
    """
    binds = []
    for target, source in sorted(tools.items()):
        path = PurePosixPath(target)
        if not path.is_absolute() or path == PurePosixPath("/") or ".." in path.parts:
            raise SandboxSetupError(f"tool directory {target!r} must be an absolute path below /")
        if path.parts[1] in _SYSTEM_DIRS:
            raise SandboxSetupError(
                f"tool directory {target!r} is inside the host's "
                f"/{path.parts[1]}: mount it elsewhere"
            )
        if not Path(source).is_dir():
            raise SandboxSetupError(f"tool directory {source!r} (for {target}) is not a directory")
        binds.append(Bind(source=Path(source), target=path, read_only=True))
    return tuple(binds)


def tools_path(binds: Sequence[Bind], then: str = SANDBOX_PATH) -> str:
    """PATH inside: the tools' bin/ first (their CLI wins over a host one), then `then`
    (the sandbox's own PATH, or an image's)."""
    return ":".join([*(str(bind.target / "bin") for bind in binds), then])


def _host_system() -> tuple[list[str], dict[str, str]]:
    """The host's system directories to bind, and its top-level symlinks to recreate."""
    binds: list[str] = []
    links: dict[str, str] = {}
    for name in _SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            links[name] = os.readlink(path)
        elif path.is_dir():
            binds.append(name)
    return binds, links


def prepare_root(layout: Layout) -> None:
    """Create the skeleton of the sandbox's `/` inside `layout.root`.

    bwrap refuses to create a symlink where one exists, so the host's top-level
    symlinks are made here, once, rather than by `bwrap --symlink` on every start. Over
    an image, the overlay's directories are made instead, and the trial's directories
    in its upper one, merged with the image's own.
    """
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o755)
    if layout.image_root is None:
        _, links = _host_system()
        for name, target in links.items():
            link = layout.root / name
            if not link.is_symlink():
                link.symlink_to(target)
    else:
        for directory in (layout.writable, layout.scratch, layout.top):
            directory.mkdir(mode=0o755, exist_ok=True)
    root = layout.writable
    workdir = layout.workdir.relative_to("/").as_posix()
    for relative in (*_TRIAL_DIRS, workdir):
        (root / relative).mkdir(parents=True, exist_ok=True)
    for relative in _STICKY_DIRS:
        (root / relative).chmod(0o1777)
    (root / "root").chmod(0o700)


def init_command(root: Path) -> tuple[str, ...]:
    """The sandbox's pid 1 (`_INIT_SCRIPT`), its `$0` naming the sandbox's directory.

    The name is how a reaper finds a pid 1 whose bwrap is gone: no other process of the
    sandbox is certain to name its directory, and pid 1's command line cannot be changed
    from inside.
    """
    return ("/bin/bash", "-c", _INIT_SCRIPT, str(root))


def init_argv(
    bwrap: str,
    layout: Layout,
    *,
    info_fd: int | None = None,
    command: Sequence[str] | None = None,
) -> list[str]:
    """The bwrap command line for the sandbox's long-lived pid 1 (or a one-shot probe).

    `--unshare-all` gives the sandbox its own user, pid, mount, network, ipc, uts and
    cgroup namespaces; the network one holds only a loopback device, so there is no
    network unless `share_network`. `--die-with-parent` takes the sandbox down with the
    thread that started it; `--cap-drop ALL` leaves pid 1 without capabilities. Over an
    image, its overlay is `/` (run it through `overlay_argv`), with no host directory
    but the binds.
    """
    argv = [bwrap, "--unshare-all"]
    if layout.share_network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--bind", str(layout.top), "/"]
    if layout.image_root is None:
        argv += _host_userland()
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for bind in layout.binds:
        flag = "--ro-bind" if bind.read_only else "--bind"
        argv += [flag, str(bind.source), str(bind.target)]
    return [*argv, "--", *(command or init_command(layout.root))]


def _host_userland() -> list[str]:
    """bwrap's arguments that lend the host's system directories, read-only, with its
    secrets masked."""
    argv = []
    binds, _ = _host_system()
    for name in binds:
        argv += ["--ro-bind", f"/{name}", f"/{name}"]
    for path in _MASKED_FILES:
        if os.path.isfile(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in _MASKED_DIRS:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
    return argv


def overlay_argv(unshare: str, mount: str, layout: Layout, argv: Sequence[str]) -> list[str]:
    """`argv` (bwrap's) run in a private mount namespace where the sandbox's overlay is
    mounted first: `layout.image_root` below, read-only; `layout.writable` above.

    `SandboxSetupError` for a path the overlay's options cannot carry.
    """
    if layout.image_root is None:
        raise SandboxSetupError("an overlay needs the image's root filesystem (image_root)")
    layers = {"lowerdir": layout.image_root, "upperdir": layout.writable, "workdir": layout.scratch}
    for name, path in layers.items():
        if any(separator in str(path) for separator in _OPTION_SEPARATORS):
            raise SandboxSetupError(
                f"the overlay's {name} {path} holds one of "
                f"{' '.join(_OPTION_SEPARATORS)}: move it elsewhere"
            )
    options = ",".join(f"{name}={path}" for name, path in layers.items())
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        _MOUNT_SCRIPT,
        "sh",
        mount,
        options,
        str(layout.top),
        *argv,
    ]


def enter_argv(
    nsenter: str, init_pid: int, cwd: PurePosixPath, command: Sequence[str]
) -> list[str]:
    """The command line that runs `command` inside the sandbox whose pid 1 is `init_pid`.

    `nsenter --all` joins every namespace of pid 1, so all commands of a trial share one
    filesystem view, one loopback network and one process tree: a tmux server started
    by one command is there for the next. `--root`/`--wd` take pid 1's root; the working
    directory is then set inside, because nsenter would resolve `--wd=DIR` on the host.
    """
    return [
        nsenter,
        "--all",
        f"--target={init_pid}",
        "--root",
        "--wd",
        "--",
        *DROP_PRIVILEGES,
        "/usr/bin/env",
        f"--chdir={cwd}",
        "--",
        *command,
    ]


def remove_root(root: Path) -> None:
    """Delete a sandbox's directory.

    Run only once no process of the sandbox is left: its binds (and its overlay) live in
    its own mount namespace, so by then `root` holds plain files and the host's /usr is
    not below it.
    (Removed earlier, the empty directories its mounts sit on go too, and the kernel
    takes the mounts away from the processes still inside: /usr vanishes under them.)
    `rmtree` never follows the symlinks an agent may have planted.
    """
    shutil.rmtree(root)
