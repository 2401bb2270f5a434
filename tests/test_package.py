"""The public surface: `harbor_ray`'s `__all__` is what a user imports, each name
resolves, and importing the package alone pulls in none of Ray, vLLM or Harbor."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import harbor_ray
import harbor_ray.errors as errors_module
from harbor_ray.errors import HarborRayError


def test_every_public_name_resolves() -> None:
    for name in harbor_ray.__all__:
        assert getattr(harbor_ray, name) is not None, name
    assert set(harbor_ray.__all__) <= set(dir(harbor_ray))


def test_the_public_errors_are_the_tree_s() -> None:
    errors = [n for n in harbor_ray.__all__ if n.endswith("Error")]
    assert "HarborRayError" in errors
    assert all(issubclass(getattr(harbor_ray, n), HarborRayError) for n in errors)
    # What the jobs raise when stopped by a signal is caught by its public name too.
    assert harbor_ray.Interrupted is errors_module.Interrupted
    assert issubclass(harbor_ray.Interrupted, HarborRayError)


def test_the_version_is_the_installed_distribution_s() -> None:
    assert harbor_ray.__version__ == importlib.metadata.version("harbor-ray")


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        harbor_ray.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_importing_the_package_imports_no_heavy_library() -> None:
    heavy = ("ray", "vllm", "harbor", "torch", "pyarrow")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, harbor_ray; print([m for m in {heavy!r} if m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_the_package_is_marked_typed() -> None:
    assert (Path(harbor_ray.__file__).parent / "py.typed").is_file()
