"""Where runs started from the page may write their rollouts as a dataset: the one
directory the deployment names (`--datasets-dir`), each dataset a plain name under it.

A visitor gives a name, never a path: a name is one path segment of letters, digits,
`.`, `_` and `-` (not starting with `.`), so it cannot climb out or name anything but a
directory right under the root. The rows are the Parquet dataset sweeps write
(`data.writer.DatasetWriter`, schema as there), one rollout committed as it lands. A
directory takes one writer at a time, so writes to the same dataset (two runs naming
it) take turns.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.writer import DatasetWriter
from harbor_ray.errors import PlaygroundRefusal

__all__ = ["DATASET_NAME", "DatasetSink"]

DATASET_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


class DatasetSink:
    """`root`: the directory runs may write datasets under; None: they may not."""

    def __init__(self, root: Path | None) -> None:
        self.root = root.resolve() if root is not None else None
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def directory(self, name: str) -> Path:
        """The dataset directory `name` stands for, or a refusal (400)."""
        if self.root is None:
            raise PlaygroundRefusal(
                "this playground writes no datasets (it was started without --datasets-dir)",
                status=400,
            )
        if not DATASET_NAME.fullmatch(name):
            raise PlaygroundRefusal(
                "a dataset is named by letters, digits, '.', '_' and '-' (one name, not a path)",
                status=400,
            )
        return self.root / name

    def write(
        self, name: str, record: RolloutRecord, manifest: Mapping[str, Any], *, ended_at: str
    ) -> None:
        """Commit one rollout to the dataset `name` (from any thread); `ended_at` goes in
        the manifest, as a sweep's end does."""
        directory = self.directory(name)
        with self._guard:
            lock = self._locks.setdefault(directory, threading.Lock())
        with lock:
            writer = DatasetWriter(directory, manifest, flush_rollouts=1)
            writer.add(record)
            writer.close(ended_at)
