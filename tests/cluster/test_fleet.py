"""The fleet settings are declared once (cluster/fleet.py): a new one is one edit. Every
field of `FleetSettings` is computed into each surface here (the sweep's flags and
their defaults, the request they make, the driver's config, the online YAML's args, the
controller's config and both manifests), so a setting that misses a surface fails."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from harbor_ray.cli import app
from harbor_ray.cluster.fleet import FleetSettings, fleet_flag, fleet_help, settings_of
from harbor_ray.cluster.sweep import SweepConfig
from harbor_ray.errors import ServiceConfigError, StartError
from harbor_ray.jobs import sweep as jobs_sweep
from harbor_ray.jobs.sweep import SweepRequest, _config
from harbor_ray.online import serve as serve_module
from harbor_ray.online.controller_config import ControllerConfig
from harbor_ray.online.serve import ControllerArgs, _validated
from tests.online.test_serve_config import _apps

NAMES = [f.name for f in dataclasses.fields(FleetSettings)]
# Values other than every default, so that a surface that drops one is seen.
CHANGED = FleetSettings(
    concurrency=3,
    max_concurrency=5,
    min_concurrency=2,
    engine_metrics=("http://e/m",),
    metrics_every_s=1.5,
    rollouts_per_host=3,
    sandbox_starts_per_s=2.0,
    journal="fsync",
    train_partial=True,
    warm_pool={"hello-file": 1},
    retries=3,
    grace_s=7.0,
)
ENGINE = _apps("online_cpu.yaml")["online"]["args"]["engine"]


def test_the_sample_changes_every_setting() -> None:
    defaults = FleetSettings()
    assert [n for n in NAMES if getattr(CHANGED, n) == getattr(defaults, n)] == []


class _Seen(Exception):
    pass


def _sweep_params() -> dict[str, Any]:
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    return {p.name: p for p in command.commands["sweep"].params}


def test_every_setting_is_a_sweep_flag_with_the_types_default() -> None:
    params = _sweep_params()
    shown = " ".join(
        CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "300"}).output.split()
    )
    for name in NAMES:
        assert fleet_flag(name) in params[name].opts and fleet_flag(name) in shown
        default = getattr(FleetSettings(), name)
        assert params[name].default == (None if isinstance(default, tuple | Mapping) else default)


def test_a_map_settings_flag_takes_name_equals_count(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[SweepRequest] = []

    def check_sweep(request: SweepRequest, *_: Any) -> None:
        seen.append(request)
        raise _Seen

    monkeypatch.setattr(jobs_sweep, "check_sweep", check_sweep)
    argv = ["sweep", "--agent", "oracle", "--out", str(tmp_path)]
    pools = ["--warm-pool", "python:3.12=4", "--warm-pool", "env-b=0"]
    result = CliRunner().invoke(app, [*argv, *pools])
    assert isinstance(result.exception, _Seen), result.output
    assert seen[0].warm_pool == {"python:3.12": 4, "env-b": 0}
    for bad in ("env-a", "=3", "env-a=-1", "env-a=x"):
        result = CliRunner().invoke(app, [*argv, "--warm-pool", bad])
        shown = " ".join(result.output.split())
        assert result.exit_code == 2 and "--warm-pool takes NAME=N" in shown, shown
        assert repr(bad) in shown
    assert len(seen) == 1


def _argv(settings: FleetSettings) -> list[str]:
    """The sweep flags that set `settings`, made from the type's fields."""
    argv: list[str] = []
    for name in NAMES:
        value, flag = getattr(settings, name), fleet_flag(name)
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif isinstance(value, Mapping):
            for key, n in value.items():
                argv += [flag, f"{key}={n}"]
        elif isinstance(value, tuple):
            for item in value:
                argv += [flag, item]
        else:
            argv += [flag, str(value)]
    return argv


def test_every_flag_reaches_the_request_the_driver_and_the_manifest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[SweepRequest] = []

    def check_sweep(request: SweepRequest, *_: Any) -> None:
        seen.append(request)
        raise _Seen

    monkeypatch.setattr(jobs_sweep, "check_sweep", check_sweep)
    result = CliRunner().invoke(
        app, ["sweep", "--agent", "oracle", "--out", str(tmp_path), *_argv(CHANGED)]
    )
    assert isinstance(result.exception, _Seen), result.output
    (request,) = seen
    assert settings_of(request) == settings_of(CHANGED)
    assert settings_of(_config(request)) == settings_of(CHANGED)
    manifest = request.manifest(["hello-file"], None)
    assert {n: manifest[n] for n in NAMES} == settings_of(CHANGED)


@pytest.fixture
def no_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture app's address without a Serve instance to ask."""
    monkeypatch.setattr(serve_module, "serve_http_base", lambda prefix: "http://s" + prefix)


@pytest.mark.usefixtures("no_serve")
def test_every_setting_is_a_yaml_field_that_reaches_the_controller(tmp_path: Path) -> None:
    for name in NAMES:
        assert ControllerArgs.model_fields[name].description == fleet_help(name)
    args = _validated(
        ControllerArgs, {"engine": ENGINE, "work_dir": str(tmp_path), **settings_of(CHANGED)}
    )
    config = args.controller_config()
    assert settings_of(config) == settings_of(CHANGED)
    assert {n: config.manifest()[n] for n in NAMES} == settings_of(CHANGED)


@pytest.mark.usefixtures("no_serve")
def test_the_services_defaults_are_the_controllers() -> None:
    args = _validated(ControllerArgs, {"engine": ENGINE})
    assert settings_of(args.controller_config()) == settings_of(
        ControllerConfig(work_dir=Path("w"))
    )


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"rollouts_per_host": 0}, "rollouts_per_host"),
        ({"sandbox_starts_per_s": -1}, "sandbox_starts_per_s"),
        ({"max_concurrency": 4, "engine_metrics": ("http://e/m",)}, "min_concurrency"),
        ({"max_concurrency": 16}, "engine_metrics"),
        ({"metrics_every_s": 0}, "metrics_every_s"),
        ({"retries": -1}, "retries"),
        ({"grace_s": 0}, "grace_s"),
        ({"journal": "sometimes"}, "journal"),
        ({"warm_pool": {"hello-file": -1}}, "warm_pool"),
    ],
)
def test_one_check_refuses_on_every_surface_naming_the_setting(
    changes: dict[str, Any], says: str
) -> None:
    flag, fields = fleet_flag(says), {"concurrency": 8, **changes}
    for make in (
        lambda: FleetSettings(**fields),
        lambda: SweepConfig(out=Path("o"), **fields),
        lambda: SweepRequest(agent="oracle", **fields),
        lambda: ControllerConfig(work_dir=Path("w"), **fields),
    ):
        with pytest.raises(StartError, match=f"{says} \\({flag}\\)"):
            make()
    yaml = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    with pytest.raises(ServiceConfigError, match=says):
        _validated(ControllerArgs, {"engine": ENGINE, **yaml})
