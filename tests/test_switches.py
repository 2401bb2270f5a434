"""The uv trap: under `uv run`, Ray starts its workers through `uv run` in a copy of the
working dir unless RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 when Ray is imported. The library's
entry points and the scripts switch it off first, or refuse at once, naming the fix.

`uv run` is played by a parent process whose command line is `uv run ...` (what Ray
looks for among a driver's ancestors): a Python running a file named `run`, with
`uv` as its argv[0]."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONSTANT = (
    "import ray._private.ray_constants as c; "
    "print('hook on' if c.RAY_ENABLE_UV_RUN_RUNTIME_ENV else 'hook off')"
)


def under_uv_run(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a python whose parent's command line is `uv run python -c CODE`."""
    (tmp_path / "run").write_text(
        "import subprocess, sys\nsys.exit(subprocess.call(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        ["uv", "run", sys.executable, "-c", code],
        executable=sys.executable,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_simulated_uv_run_is_what_ray_detects(tmp_path: Path) -> None:
    done = under_uv_run(
        tmp_path,
        "from ray._private.runtime_env.uv_runtime_env_hook "
        "import _get_uv_run_cmdline as f; print(f()[:2])",
    )
    assert done.stdout.strip() == "['uv', 'run']", done.stderr


def test_the_library_switches_the_hook_off_before_ray_is_imported(tmp_path: Path) -> None:
    done = under_uv_run(tmp_path, f"import harbor_ray; harbor_ray.SweepRequest; {CONSTANT}")
    assert done.stdout.strip() == "hook off", done.stderr


def test_ray_imported_first_is_refused_naming_the_fix(tmp_path: Path) -> None:
    done = under_uv_run(tmp_path, "import ray; import harbor_ray; harbor_ray.run_sweep")
    assert done.returncode != 0
    assert "StartError" in done.stderr
    assert "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" in done.stderr, done.stderr


def test_a_script_switches_the_hook_off_before_its_ray_import(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "bench_cluster_proxy.py"
    done = under_uv_run(
        tmp_path,
        f"import sys; sys.path.insert(0, {str(script.parent)!r}); "
        f"import runpy; runpy.run_path({str(script)!r}); {CONSTANT}",
    )
    assert done.stdout.strip() == "hook off", done.stderr


def test_without_uv_run_nothing_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    done = subprocess.run(
        [sys.executable, "-c", "import ray; import harbor_ray.jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "builder",
    ["harbor_ray.engine.serve:build_engine_app", "harbor_ray.online.serve:build_controller"],
)
def test_a_serve_config_s_builder_is_refused_naming_the_fix(tmp_path: Path, builder: str) -> None:
    """`uv run serve run YAML`: Serve imports Ray, then the YAML's builder."""
    module, name = builder.split(":")
    done = under_uv_run(
        tmp_path, f"import ray, importlib; m = importlib.import_module({module!r}); m.{name}({{}})"
    )
    assert done.returncode != 0
    assert "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" in done.stderr, done.stderr[-2000:]
