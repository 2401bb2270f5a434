from pathlib import Path

import pytest

from harbor_ray.errors import SandboxArgumentError, UnknownBackendError
from harbor_ray.trials.backend_needs import missing_arguments
from harbor_ray.trials.backends import (
    BackendStatus,
    backend_names,
    check_backend,
    environment_config,
    parse_sandbox_args,
)
from tests.fake_docker import path_with_docker, path_with_program, without_cloud_credentials


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


@pytest.mark.parametrize(
    ("daemon", "compose", "usable", "reason"),
    [
        (False, True, False, "Docker daemon is not running. Please start Docker and try again."),
        (True, True, True, "preflight passed"),
        # Harbor's preflight passes, and every start would fail at `docker compose`.
        (
            True,
            False,
            False,
            "`docker compose` (Compose v2) is not installed, and Harbor's "
            "docker backend starts every trial with it: install the Compose v2 plugin, or use "
            "--sandbox container (the task's image, built with Docker, run without Compose)",
        ),
    ],
)
def test_docker_is_usable_exactly_when_its_daemon_and_compose_answer(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    daemon: bool,
    compose: bool,
    usable: bool,
    reason: str,
) -> None:
    monkeypatch.setenv("PATH", path_with_docker(tmp_path, daemon=daemon, compose=compose))
    assert check_backend("docker") == BackendStatus("docker", usable, reason)


def test_docker_is_unusable_without_its_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    status = check_backend("docker")
    assert not status.usable and status.reason.startswith("Docker is not installed")


@pytest.mark.parametrize(
    ("name", "variable"), [("e2b", "E2B_API_KEY"), ("runloop", "RUNLOOP_API_KEY")]
)
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
    container = environment_config("container")
    assert container.import_path == "harbor_ray.trials.sandbox.container:ContainerEnvironment"
    assert local.kwargs == {"share_network": True}
    assert environment_config("docker").type.value == "docker"
    with pytest.raises(UnknownBackendError, match="known: local"):
        environment_config("vmware")


# Backends whose Harbor preflight passes vacuously: each is unusable, naming what is
# missing, until that is there.


def test_singularity_needs_its_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    status = check_backend("singularity")
    assert not status.usable and "`singularity` not found on PATH" in status.reason
    monkeypatch.setenv("PATH", path_with_program(tmp_path, "singularity"))
    assert check_backend("singularity").usable


def test_ec2_needs_region_image_and_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    without_cloud_credentials(monkeypatch, tmp_path)
    status = check_backend("ec2")
    assert not status.usable
    for missing in ("requires `region`", "requires `ami_id`", "no AWS credentials"):
        assert missing in status.reason, status.reason
    status = check_backend("ec2", {"region": "us-east-1", "launch_mode": "attach"})
    assert "requires `instance_id`" in status.reason and "region" not in status.reason
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert check_backend("ec2", {"region": "us-east-1", "ami_id": "ami-1"}).usable


def test_ec2_names_an_unknown_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_cloud_credentials(monkeypatch, tmp_path)
    status = check_backend(
        "ec2", {"region": "us-east-1", "ami_id": "ami-1", "aws_profile": "nobody"}
    )
    assert not status.usable and "nobody" in status.reason


def test_sbx_cloud_needs_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_cloud_credentials(monkeypatch, tmp_path)
    status = check_backend("sbx")
    assert not status.usable and "no Docker Sandboxes Cloud credentials" in status.reason
    monkeypatch.setenv("SBX_DOCKER_USERNAME", "me")
    assert not check_backend("sbx").usable  # a username without its PAT
    monkeypatch.setenv("SBX_DOCKER_PAT", "pat")
    assert check_backend("sbx").usable
    missing = str(tmp_path / "no-token")
    assert "credentials" in check_backend("sbx", {"token_file": missing}).reason


def test_sbx_local_needs_its_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    status = check_backend("sbx", {"target": "local"})
    assert not status.usable and "`sbx` not found on PATH" in status.reason
    monkeypatch.setenv("PATH", path_with_program(tmp_path, "sbx"))
    assert check_backend("sbx", {"target": "local"}).usable


class _Needy:
    def __init__(self, environment_dir, task_env_config, *, region, zone="a") -> None: ...


def test_constructor_arguments_harbor_does_not_supply_are_named() -> None:
    assert missing_arguments(_Needy, {}) == [
        "its constructor requires `region`: pass --sandbox-arg region=VALUE"
    ]
    assert missing_arguments(_Needy, {"region": "r"}) == []
    assert missing_arguments(_Needy, {"region": "r", "colour": 1}) == [
        "its constructor takes no argument `colour`"
    ]


def test_sandbox_args_are_json_or_strings() -> None:
    assert parse_sandbox_args(
        ["region=us-east-1", "use_public_ip=false", "n=2", 'ids=["sg-1"]', "empty="]
    ) == {"region": "us-east-1", "use_public_ip": False, "n": 2, "ids": ["sg-1"], "empty": ""}
    with pytest.raises(SandboxArgumentError, match="KEY=VALUE"):
        parse_sandbox_args(["region"])
