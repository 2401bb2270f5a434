"""The agent CLIs' pinned releases (`agent_versions.toml`), read and checked once: apart
from installing them (installs.py), since the rollout, the harness's provenance and
qualification read the pins without installing anything.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from harbor_ray.errors import AgentPinError

__all__ = ["PINS", "PINS_FILE", "AgentPin", "Registry", "load_pins"]

PINS_FILE = Path(__file__).with_name("agent_versions.toml")

Registry = Literal["npm", "pypi"]
_NODE_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class AgentPin:
    """One agent CLI at one release, as pinned in `agent_versions.toml`."""

    agent: str  # Harbor's agent name
    registry: Registry
    package: str
    version: str
    bins: tuple[str, ...]
    # pypi only: the interpreter the venv is built on, a path or a version ("3.12":
    # the CPython harbor-ray itself runs on, resolve_python)
    python: str | None = None
    check: tuple[str, ...] = ("--version",)  # arguments every command must answer
    # pypi only: more requirements for the same venv (openhands-sdk's tools and the
    # fastapi its runner imports), for what the adapter runs besides the agent
    with_: tuple[str, ...] = ()
    # pypi only: where the adapter runs the venv from (openhands' /opt/openhands-venv):
    # the sandbox mounts the entry's venv there too
    venv_at: str | None = None
    # npm only: the Node release the CLI runs on, itself installed from npm into the
    # entry (None: the host's Node).
    node: str | None = None

    @property
    def entry_name(self) -> str:
        # The Node release is part of the entry: a new one is a new install.
        node = f"-node{self.node}" if self.node else ""
        return f"{self.agent}-{self.version}{node}"

    @property
    def spec(self) -> str:
        return (
            f"{self.package}@{self.version}"
            if self.registry == "npm"
            else (f"{self.package}=={self.version}")
        )


def load_pins(text: str) -> Mapping[str, AgentPin]:
    """The pins of an `agent_versions.toml`, by agent name (AgentPinError when malformed)."""
    table = tomllib.loads(text).get("agents", {})
    pins: dict[str, AgentPin] = {}
    for agent, entry in table.items():
        registry = entry.get("registry")
        if registry not in ("npm", "pypi"):
            raise AgentPinError(f"{agent}: registry must be 'npm' or 'pypi', not {registry!r}")
        bins = tuple(entry.get("bins", ()))
        if not (bins or entry.get("venv_at")) or not all(
            isinstance(b, str) and b and "/" not in b for b in bins
        ):
            raise AgentPinError(
                f"{agent}: bins must be a non-empty list of command names (empty only with venv_at)"
            )
        python = entry.get("python")
        if registry == "pypi" and not python:
            raise AgentPinError(f"{agent}: a pypi agent needs python (its venv's interpreter)")
        node = entry.get("node")
        if node is not None and (registry != "npm" or not _NODE_VERSION.match(str(node))):
            raise AgentPinError(
                f"{agent}: node must be a release like '24.16.0', and only "
                f"for an npm agent, not {node!r}"
            )
        pins[agent] = AgentPin(
            agent=agent,
            registry=registry,
            package=str(entry["package"]),
            version=str(entry["version"]),
            bins=bins,
            python=python,
            check=tuple(entry.get("check", ("--version",))),
            with_=tuple(entry.get("with", ())),
            venv_at=entry.get("venv_at"),
            node=None if node is None else str(node),
        )
    return MappingProxyType(pins)


PINS: Mapping[str, AgentPin] = load_pins(PINS_FILE.read_text())
