"""The catalog the playground's tests serve: harbor_ray's sample tasks."""

from __future__ import annotations

import pytest

from harbor_ray.playground.catalog import Catalog
from harbor_ray.trials.datasets import resolve_dataset


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog([resolve_dataset("samples")])
