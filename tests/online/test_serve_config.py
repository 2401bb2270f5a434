"""serve_configs/online_*.yaml against the builders that read them, and the key file."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
import yaml

from harbor_ray.errors import ServiceConfigError, WarmPoolUnsupportedError
from harbor_ray.online.controller import ControllerConfig
from harbor_ray.online.controller_key import load_or_create_key
from harbor_ray.online.serve import CaptureArgs, ControllerArgs, _validated

CONFIGS = Path(__file__).resolve().parents[2] / "serve_configs"
ARGS = {"capture": CaptureArgs, "online": ControllerArgs}


def _apps(name: str) -> dict[str, dict]:
    return {a["name"]: a for a in yaml.safe_load((CONFIGS / name).read_text())["applications"]}


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_the_online_engine_is_the_engine_config_s(kind: str) -> None:
    # One engine per machine: the online YAML's engine app must be the plain one, so a
    # running `engine_*.yaml` engine is the same application.
    (engine,) = _apps(f"engine_{kind}.yaml").values()
    online = _apps(f"online_{kind}.yaml")
    assert online["engine"] == engine
    for name, model in ARGS.items():
        args = _validated(model, online[name]["args"])
        assert args.engine == engine["args"]  # the YAML alias, not a copy that can drift
    assert online["online"]["args"]["capture_app"] == "capture"


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_every_user_field_is_in_the_yaml_and_commented(kind: str) -> None:
    text = (CONFIGS / f"online_{kind}.yaml").read_text()
    for name, model in ARGS.items():
        block = text[text.index(f"- name: {name}") :]
        block = block[: block.find("\n  - name:", 1) if "\n  - name:" in block[1:] else None]
        for field in model.model_fields:
            line = re.search(rf"^\s*#?\s*{field}:.*$", block, re.MULTILINE)
            assert line, f"{name}: {field} is not in online_{kind}.yaml"
            assert "#" in line.group(0).lstrip().lstrip("#"), f"{name}: {field} has no comment"


def test_a_misspelt_field_fails_the_deploy_naming_it() -> None:
    args = {**_apps("online_cpu.yaml")["online"]["args"], "capacty": 3}
    with pytest.raises(ServiceConfigError, match="capacty"):
        _validated(ControllerArgs, args)
    bad_engine = {"engine": {"model_id": "m", "colour": 1}}
    with pytest.raises(ServiceConfigError, match=r"engine\.colour"):
        _validated(CaptureArgs, bad_engine)


def test_the_key_file_is_made_once_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "controller.key"
    key, created = load_or_create_key(path)
    assert created and len(key) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == (key, False)
    path.chmod(0o640)
    with pytest.raises(ServiceConfigError, match="chmod 600"):
        load_or_create_key(path)
    path.chmod(0o600)
    path.write_text("\n")
    with pytest.raises(ServiceConfigError, match="empty"):
        load_or_create_key(path)


def test_the_engine_kind_is_a_capture_field_and_sglang_needs_an_engine_url() -> None:
    engine = _apps("online_cpu.yaml")["capture"]["args"]["engine"]
    sglang = {"engine": engine, "engine_url": "http://sgl:30000/v1", "engine_kind": "sglang"}
    assert _validated(CaptureArgs, sglang).engine_kind == "sglang"
    assert _validated(CaptureArgs, {"engine": engine}).engine_kind == "auto"
    with pytest.raises(ServiceConfigError, match="engine_url"):
        _validated(CaptureArgs, {"engine": engine, "engine_kind": "sglang"})
    with pytest.raises(ServiceConfigError, match="engine_kind"):
        _validated(CaptureArgs, {"engine": engine, "engine_kind": "tgi"})


def test_the_sandbox_start_rate_is_a_service_field() -> None:
    args = {**_apps("online_cpu.yaml")["online"]["args"], "sandbox_starts_per_s": 5}
    assert _validated(ControllerArgs, args).sandbox_starts_per_s == 5
    with pytest.raises(ServiceConfigError, match="sandbox_starts_per_s"):
        _validated(ControllerArgs, {**args, "sandbox_starts_per_s": -1})


def test_the_warm_pool_is_a_service_field_refused_off_the_local_sandbox(tmp_path: Path) -> None:
    args = {**_apps("online_cpu.yaml")["online"]["args"], "warm_pool": {"hello-file": 2}}
    assert _validated(ControllerArgs, args).warm_pool == {"hello-file": 2}
    with pytest.raises(ServiceConfigError, match="warm_pool"):
        _validated(ControllerArgs, {**args, "warm_pool": {"hello-file": -1}})
    with pytest.raises(WarmPoolUnsupportedError, match="--sandbox container or local"):
        ControllerConfig(work_dir=tmp_path, sandbox="modal", warm_pool={"hello-file": 2})


def test_the_hosts_userland_is_a_service_field_off_by_default() -> None:
    """A submitted task that needs its own image, on the local sandbox, is an
    environment_unsupported row unless the YAML asks for the host's userland."""
    args = _apps("online_cpu.yaml")["online"]["args"]
    assert _validated(ControllerArgs, args).host_userland is False
    assert _validated(ControllerArgs, {**args, "host_userland": True}).host_userland is True
    assert ControllerConfig(work_dir=Path("w")).host_userland is False
