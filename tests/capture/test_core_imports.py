"""The capture core is pure: importing it pulls in no Ray, HTTP stack or Harbor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import harbor_ray.capture
from harbor_ray.capture import CORE

EDGES = ("ray", "starlette", "uvicorn", "httpx", "aiohttp", "httptools", "harbor", "litellm")


def test_the_core_imports_no_edge_library() -> None:
    program = (
        "import importlib, json, sys\n"
        f"for name in {list(CORE)!r}:\n"
        "    importlib.import_module(f'harbor_ray.capture.core.{name}')\n"
        f"print(json.dumps(sorted(m for m in {list(EDGES)!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


def test_the_list_names_every_module_of_the_core() -> None:
    # A module left out of CORE would escape the check above.
    core = Path(harbor_ray.capture.__file__).parent / "core"
    modules = {path.stem for path in core.glob("*.py")} - {"__init__"}
    modules |= {path.parent.name for path in core.glob("*/__init__.py")}
    assert sorted(CORE) == sorted(modules)


def test_an_edge_module_is_seen_by_the_same_check() -> None:
    # The check above must be able to fail: the app is an edge and imports Starlette.
    program = "import sys, harbor_ray.capture.proxy.app; print('starlette' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "True"


def test_the_public_surface() -> None:
    for name in harbor_ray.capture.__all__:
        assert hasattr(harbor_ray.capture, name), name
