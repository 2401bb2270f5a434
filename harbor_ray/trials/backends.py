"""Sandbox backends: which ones exist, which are usable here, and how to configure one.

docs/lessons.md: checking credentials alone reported a backend available that then failed at
rollout time. A backend is usable only if its class imports, the SDK its Harbor extra
names is installed, Harbor's own preflight passes, and what that preflight does not
check is there too (its constructor's arguments, its programs and credentials:
`backend_needs`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harbor.environments.factory import _ENVIRONMENT_REGISTRY, EnvironmentFactory
from harbor.models.environment_type import EnvironmentType
from harbor.models.trial.config import EnvironmentConfig

from harbor_ray.errors import SandboxArgumentError, UnknownBackendError
from harbor_ray.trials.backend_needs import Context, find_needs

LOCAL = "local"
CONTAINER = "container"
# harbor_ray's own backends: bubblewrap on this machine, over the host's userland
# (local) or over the task's image, built with Docker (container).
_OWN = {
    LOCAL: "harbor_ray.trials.sandbox.bwrap:BwrapEnvironment",
    CONTAINER: "harbor_ray.trials.sandbox.container:ContainerEnvironment",
}
_OWN_WHAT = {
    LOCAL: "bubblewrap sandbox on this machine, over the host's userland",
    CONTAINER: "bubblewrap sandbox on this machine, over the task's image built with Docker",
}
# Sandboxes that run on this node and reach the proxy through a forward, with the
# agents' CLIs bound in from the host's cache.
ON_THIS_NODE = frozenset(_OWN)


@dataclass(frozen=True)
class BackendStatus:
    name: str
    usable: bool
    reason: str  # why not usable, or what it is when usable


def backend_names() -> list[str]:
    """harbor_ray's own (`local`, `container`) first, then every type Harbor registers,
    in Harbor's order."""
    return [*_OWN, *(t.value for t in _ENVIRONMENT_REGISTRY)]


def provides_task_image(name: str) -> bool:
    """Whether backend `name` runs a trial in the task's own image (its Dockerfile built,
    or its docker_image). Only `local` does not: it runs on the host's userland. Every
    Harbor backend builds or pulls the task's image itself."""
    return name != LOCAL


def environment_config(name: str, kwargs: Mapping[str, Any] | None = None) -> EnvironmentConfig:
    """The Harbor environment config of a backend, with per-rollout constructor kwargs."""
    if name in _OWN:
        return EnvironmentConfig(import_path=_OWN[name], kwargs=dict(kwargs or {}))
    try:
        kind = EnvironmentType(name)
    except ValueError:
        raise UnknownBackendError(
            f"unknown sandbox {name!r}; known: {', '.join(backend_names())}"
        ) from None
    return EnvironmentConfig(type=kind, kwargs=dict(kwargs or {}))


def parse_sandbox_args(pairs: Iterable[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings as constructor kwargs. A VALUE that is JSON is that JSON (a
    number, true, a list), else the string itself (a region, a path)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SandboxArgumentError(f"--sandbox-arg takes KEY=VALUE, not {pair!r}")
        try:
            kwargs[key] = json.loads(text)
        except ValueError:
            kwargs[key] = text
    return kwargs


def check_backend(name: str, kwargs: Mapping[str, Any] | None = None) -> BackendStatus:
    """SDK, import, Harbor's preflight, then what it lacks; the first failure is the
    reason (every missing piece of the last step). `kwargs` are the constructor kwargs
    the rollouts will pass (`--sandbox-arg`)."""
    if name in _OWN:
        module, class_name = _OWN[name].split(":")
        extra = None
    else:
        try:
            entry = _ENVIRONMENT_REGISTRY[EnvironmentType(name)]
        except (ValueError, KeyError):
            return BackendStatus(name, False, "not a Harbor environment type")
        module, class_name, extra = entry.module, entry.class_name, entry.pip_extra
    missing = _missing_sdk(extra) if extra else []
    if missing:
        return BackendStatus(name, False, f"SDK not installed: {', '.join(missing)}")
    try:
        cls = getattr(importlib.import_module(module), class_name)
    except Exception as exc:  # an import can fail in any way a vendor SDK likes
        return BackendStatus(name, False, f"cannot import {class_name}: {exc}")
    problem = _preflight_problem(cls)
    if problem:
        return BackendStatus(name, False, problem)
    context = Context(
        kwargs=dict(kwargs or {}), environ=os.environ, search_path=os.environ.get("PATH", "")
    )
    needs = find_needs(name, cls, context)
    if needs:
        return BackendStatus(name, False, "; ".join(needs))
    if name in _OWN:
        return BackendStatus(name, True, _OWN_WHAT[name])
    return BackendStatus(name, True, "preflight passed")


# Where Harbor loads a backend's class and calls its constructor.
_CONSTRUCTING = frozenset(
    method.__func__.__code__
    for method in (
        EnvironmentFactory.create_environment,
        EnvironmentFactory.create_environment_from_import_path,
        EnvironmentFactory.create_environment_from_config,
    )
)


def raised_constructing(exc: BaseException) -> bool:
    """Whether `exc` came out of Harbor making a backend's environment object (its
    class's import or its constructor), which is the sandbox failing to start rather
    than a fault of the task or the agent."""
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code in _CONSTRUCTING:
            return True
        frame = frame.tb_next
    return False


def _preflight_problem(cls: Any) -> str | None:
    # Preflights report by SystemExit (Harbor's convention) or by raising; some print.
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            cls.preflight()
    except SystemExit as exc:
        return _one_line(str(exc.code if exc.code is not None else printed.getvalue()))
    except Exception as exc:
        return _one_line(f"{type(exc).__name__}: {exc}")
    return None


def _missing_sdk(extra: str) -> list[str]:
    """Distributions that harbor's `extra` requires and this environment lacks."""
    requires = importlib.metadata.requires("harbor") or []
    missing = []
    for requirement in requires:
        if f"extra == '{extra}'" not in requirement and f'extra == "{extra}"' not in requirement:
            continue
        match = re.match(r"[A-Za-z0-9._-]+", requirement)
        if match is None:
            continue
        try:
            importlib.metadata.version(match.group(0))
        except importlib.metadata.PackageNotFoundError:
            missing.append(match.group(0))
    return missing


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
