"""Can this machine run bubblewrap sandboxes? Say exactly what is missing if not.

A sandbox backend that looks available but fails at rollout time produces a batch of
failed rollouts instead of one clear error, so the checks go as far as starting a real
(one-shot) sandbox with the same layout the trials use.

Where the host tools are looked up (`search_path`, a PATH-style string) is a parameter,
so that the checks, and the environment, can be pointed at a given set of tools.

A sandbox over an image (the container sandbox) also mounts an overlay: `overlay_problems`
says whether it can, by mounting one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harbor_ray.errors import SandboxUnavailableError
from harbor_ray.trials.sandbox.layout import (
    DROP_PRIVILEGES,
    Layout,
    init_argv,
    overlay_argv,
    prepare_root,
)

__all__ = [
    "HostTools",
    "SandboxUnavailableError",
    "find_problems",
    "find_tools",
    "overlay_problems",
]

# What the probe runs inside: the same privilege drop and shell every command goes
# through, then the marker that proves the sandbox came up.
_PROBE_MARKER = "sandbox-ok"
_PROBE_COMMAND = (
    *DROP_PRIVILEGES,
    "/bin/bash",
    "-c",
    f"echo {_PROBE_MARKER}",
)
_PROBE_TIMEOUT_SEC = 30

# The host programs a sandbox needs, each with its remedy: to make and enter one; to run
# the host's userland inside; to mount an image's overlay.
_SANDBOX_TOOLS = {
    "bwrap": "install the Debian package `bubblewrap` (apt-get install bubblewrap)",
    "nsenter": "install the Debian package `util-linux`",
}
_HOST_USERLAND_TOOLS = {
    "tmux": "install the Debian package `tmux`; terminus-2 drives the sandbox "
    "through tmux, run from the host's /usr inside the sandbox",
}
_OVERLAY_TOOLS = {
    "unshare": "install the Debian package `util-linux`",
    "mount": "install the Debian package `mount`",
}


@dataclass(frozen=True)
class HostTools:
    """Host programs that build and enter sandboxes, as absolute paths."""

    bwrap: str
    nsenter: str
    # Those that mount an image's overlay (layout.overlay_argv): found for a sandbox over
    # an image only.
    unshare: str | None = None
    mount: str | None = None


def _missing(search_path: str | None, wanted: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The tools of `wanted` found, and a problem line for each one that is not."""
    found: dict[str, str] = {}
    problems: list[str] = []
    for name, remedy in wanted.items():
        path = shutil.which(name, path=search_path)
        if path is None:
            problems.append(f"`{name}` not found on PATH ({search_path}): {remedy}.")
        else:
            found[name] = path
    return found, problems


def _search_path(search_path: str | None) -> str:
    """Where tools are looked up: `search_path`, by default this process's PATH."""
    return search_path if search_path is not None else os.environ.get("PATH", "")


def _probe(bwrap: str) -> str | None:
    """Start a one-shot sandbox; None if it came up, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="bwrap-preflight-") as directory:
        layout = Layout(root=Path(directory))
        prepare_root(layout)
        argv = init_argv(bwrap, layout, command=_PROBE_COMMAND)
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_SEC,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`{bwrap}` could not be run: {exc}."
    if result.returncode == 0 and result.stdout.strip() == _PROBE_MARKER:
        return None
    return (
        f"`{bwrap}` cannot create the sandbox (exit {result.returncode}); user "
        "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, "
        "user.max_user_namespaces) or blocked (AppArmor, seccomp in a container). "
        f"bwrap said: {result.stderr.strip() or '(nothing)'}"
    )


def find_problems(search_path: str | None = None) -> list[str]:
    """Everything that stops sandboxes from working here, one line each; [] if none.

    `search_path` defaults to this process's PATH.
    """
    search_path = _search_path(search_path)
    found, problems = _missing(search_path, {**_SANDBOX_TOOLS, **_HOST_USERLAND_TOOLS})
    if "bwrap" in found:
        failure = _probe(found["bwrap"])
        if failure is not None:
            problems.append(failure)
    return problems


def overlay_problems(search_path: str | None = None) -> list[str]:
    """What stops this machine from mounting a sandbox's overlay over an image, one line
    each; [] if nothing. Mounts one, in a mount namespace of its own, to be sure."""
    search_path = _search_path(search_path)
    found, problems = _missing(search_path, _OVERLAY_TOOLS)
    if os.geteuid() != 0:
        return [*problems, "the container sandbox needs root to mount overlayfs."]
    if not problems:
        failure = _probe_overlay(found["unshare"], found["mount"])
        if failure is not None:
            problems.append(failure)
    return problems


def _probe_overlay(unshare: str, mount: str) -> str | None:
    """Mount an overlay the way a sandbox does; None if it mounted, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="overlay-preflight-") as directory:
        image = Path(directory) / "image"  # an empty root filesystem
        image.mkdir()
        layout = Layout(root=Path(directory) / "sandbox", image_root=image)
        prepare_root(layout)
        argv = overlay_argv(unshare, mount, layout, ["/bin/true"])
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_SEC,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`{unshare}` could not be run: {exc}."
    if result.returncode == 0:
        return None
    return (
        f"cannot mount an overlay (exit {result.returncode}): the kernel needs overlayfs "
        f"(modprobe overlay). It said: {result.stderr.strip() or '(nothing)'}"
    )


def find_tools(search_path: str | None = None, *, image: bool = False) -> HostTools:
    """The host tools, or `SandboxUnavailableError` naming everything that is missing:
    for a sandbox over an image (`image`), those that mount its overlay rather than those
    the host's userland needs inside.

    Only looks the tools up (no probe): it runs at every sandbox start.
    """
    search_path = _search_path(search_path)
    extra = _OVERLAY_TOOLS if image else _HOST_USERLAND_TOOLS
    found, problems = _missing(search_path, {**_SANDBOX_TOOLS, **extra})
    if problems:
        raise SandboxUnavailableError("\n".join(problems))
    return HostTools(
        bwrap=found["bwrap"],
        nsenter=found["nsenter"],
        unshare=found.get("unshare"),
        mount=found.get("mount"),
    )
