"""`info --probe`'s core: one real sandbox started and stopped, or the reason it was not."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.trials.sandbox_probe import probe_backend
from tests.fake_docker import without_cloud_credentials


async def test_local_sandbox_starts_and_stops_leaving_nothing(tmp_path: Path) -> None:
    sandboxes = tmp_path / "sandboxes"
    result = await probe_backend("local", {"sandboxes_dir": str(sandboxes)})
    assert result.ok, result.reason
    assert result.start_s is not None and result.stop_s is not None
    assert list(sandboxes.iterdir()) == []  # stop(delete=True) removed the sandbox


async def test_an_unusable_backend_is_not_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    without_cloud_credentials(monkeypatch, tmp_path)
    result = await probe_backend("ec2")
    assert not result.ok and result.reason.startswith("not usable: ")
    assert "requires `region`" in result.reason and result.start_s is None


async def test_a_constructor_error_is_named(tmp_path: Path) -> None:
    result = await probe_backend("local", {"forward": {"not-a-port": "x"}})
    assert not result.ok and result.reason.startswith("could not be constructed: ")
