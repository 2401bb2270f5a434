from pathlib import Path

import pytest

from harbor_ray.errors import UnknownBackendError
from harbor_ray.trials.backends import (
    BackendStatus,
    backend_names,
    check_backend,
    environment_config,
)
from tests.fake_docker import path_with_docker


def test_every_harbor_type_is_listed_after_local() -> None:
    names = backend_names()
    assert names[0] == "local"
    assert {"docker", "e2b", "modal", "daytona", "runloop", "podman"} <= set(names)


def test_local_sandbox_is_usable_here() -> None:
    status = check_backend("local")
    assert status.usable, status.reason


def test_local_sandbox_unusable_without_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    status = check_backend("local")
    assert not status.usable and "bubblewrap" in status.reason


@pytest.mark.parametrize(("daemon", "usable", "reason"), [
    (False, False, "Docker daemon is not running. Please start Docker and try again."),
    (True, True, "preflight passed"),
])
def test_docker_is_usable_exactly_when_its_daemon_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, daemon: bool, usable: bool, reason: str
) -> None:
    monkeypatch.setenv("PATH", path_with_docker(tmp_path, daemon=daemon))
    assert check_backend("docker") == BackendStatus("docker", usable, reason)


def test_docker_is_unusable_without_its_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    status = check_backend("docker")
    assert not status.usable and status.reason.startswith("Docker is not installed")


@pytest.mark.parametrize(("name", "variable"), [("e2b", "E2B_API_KEY"),
                                                ("runloop", "RUNLOOP_API_KEY")])
def test_installed_sdk_without_credentials_fails_preflight(
    monkeypatch: pytest.MonkeyPatch, name: str, variable: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    status = check_backend(name)
    assert not status.usable and variable in status.reason


def test_missing_sdk_is_named() -> None:
    status = check_backend("novita")
    assert not status.usable and status.reason.startswith("SDK not installed: novita")


def test_environment_configs() -> None:
    local = environment_config("local", {"share_network": True})
    assert local.import_path == "harbor_ray.trials.sandbox.bwrap:BwrapEnvironment"
    assert local.kwargs == {"share_network": True}
    assert environment_config("docker").type.value == "docker"
    with pytest.raises(UnknownBackendError, match="known: local"):
        environment_config("vmware")
