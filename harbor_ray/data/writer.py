"""Appending rollouts to a dataset directory so that a crash loses only the unflushed.

Layout: `rollouts/`, `sequences/`, `turns/` each hold Parquet part files; one flush
writes one part into each, all three with the same name, and `_manifest.json` says what
run made them. A part appears under its final name only complete (written to a hidden
temporary name, synced, renamed), and a flush writes sequences/ and turns/ before
rollouts/. So a rollouts/ row means the rollout's other rows are on disk, and
`finished_ids` (read from rollouts/) is exactly what a rerun may skip.

A crash between those writes leaves sequences/ or turns/ parts whose name has no
rollouts/ part. Opening the directory again deletes them (and any temporary file): their
rollouts were not finished, the rerun writes them again, and nothing is duplicated.
This is why a directory takes one writer at a time.

No clock here either: the caller puts start and end times in the manifest.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harbor_ray.data.encode import RolloutRecord, rollouts_table
from harbor_ray.data.schema import SCHEMA_VERSION, TABLES
from harbor_ray.errors import DuplicateRolloutError, SchemaMismatchError

__all__ = ["MANIFEST", "PART_SUFFIX", "DatasetWriter", "parquet_options"]

MANIFEST = "_manifest.json"
PART_SUFFIX = ".parquet"
_PART = re.compile(r"part-(\d+)-[0-9a-f]+\.parquet")
_TEMP_SUFFIX = ".tmp"


class DatasetWriter:
    """Buffers encoded rollouts and commits them as one part per table per flush.

    A flush happens when `flush_rollouts` rollouts or `flush_bytes` bytes of Arrow data
    are buffered, on `flush()` and on `close()`. Smaller flushes lose less to a crash
    and make more files.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        manifest: Mapping[str, Any],
        *,
        flush_rollouts: int = 32,
        flush_bytes: int = 256 << 20,
    ) -> None:
        self.root = Path(out_dir)
        self.flush_rollouts = flush_rollouts
        self.flush_bytes = flush_bytes
        for name, _ in TABLES:
            (self.root / name).mkdir(parents=True, exist_ok=True)
        _discard_unfinished(self.root)
        self._manifest = _open_manifest(self.root, manifest)
        self._finished = _read_finished(self.root)
        self._pending: list[RolloutRecord] = []
        self._pending_ids: set[str] = set()
        self._pending_bytes = 0
        self._next_part = _next_part_number(self.root)
        # Two writers on one directory are a misuse, but must not overwrite each other.
        self._token = secrets.token_hex(4)
        self._closed = False

    def finished_ids(self) -> set[str]:
        """Ids of the rollouts committed to disk (buffered ones are not finished yet)."""
        return set(self._finished)

    def add(self, record: RolloutRecord) -> None:
        """Buffer one rollout; flush if a threshold is reached.

        Raises DuplicateRolloutError for a rollout id already finished or buffered: writing it twice
        would duplicate its rows, so the caller must skip `finished_ids()`.
        """
        assert not self._closed, "add after close"
        rollout_id = record.rollout_id
        if rollout_id in self._finished or rollout_id in self._pending_ids:
            raise DuplicateRolloutError(f"rollout {rollout_id!r} is already in the dataset")
        self._pending.append(record)
        self._pending_ids.add(rollout_id)
        self._pending_bytes += record.nbytes
        if len(self._pending) >= self.flush_rollouts or self._pending_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Commit the buffered rollouts: sequences/ and turns/ first, rollouts/ last."""
        if not self._pending:
            return
        name = f"part-{self._next_part:06d}-{self._token}{PART_SUFFIX}"
        tables = {
            "sequences": pa.concat_tables([p.sequences for p in self._pending]),
            "turns": pa.concat_tables([p.turns for p in self._pending]),
            "rollouts": rollouts_table(self._pending),  # all the rows at once: see encode.py
        }
        for directory, schema in TABLES:
            table = tables[directory]
            if table.num_rows:
                _write_atomically(self.root / directory / name, table, schema)
        self._finished.update(self._pending_ids)
        self._pending.clear()
        self._pending_ids.clear()
        self._pending_bytes = 0
        self._next_part += 1

    def close(self, ended_at: Any) -> None:
        """Flush, then record `ended_at` (any JSON value the caller chose) in the manifest."""
        self.flush()
        self._manifest["ended_at"] = ended_at
        _write_json(self.root / MANIFEST, self._manifest)
        self._closed = True


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """How each table is written; chosen for bytes per token (see scripts/bench_data.py).

    zstd at level 1 shrinks token ids well below their int32 size at little CPU cost
    (higher levels gain little for much more: docs/performance.md). Ids stay PLAIN: real
    token streams are skewed, which zstd exploits better than delta encoding. Float lists
    are split by byte (exponent bytes compress apart from mantissas). Dictionaries and
    statistics are kept for the scalar columns only: on token lists they cost time and are
    useless.
    """
    scalars = [f.name for f in schema if not _is_list(f.type)]
    floats = [f"{f.name}.list.element" for f in schema if _is_list_of(f.type, pa.float32())]
    return {
        "compression": "zstd",
        "compression_level": 1,
        "use_dictionary": scalars,
        "write_statistics": scalars,
        "column_encoding": dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
    }


def _is_list(type_: pa.DataType) -> bool:
    return bool(pa.types.is_list(type_) or pa.types.is_map(type_))


def _is_list_of(type_: pa.DataType, value: pa.DataType) -> bool:
    return bool(pa.types.is_list(type_) and type_.value_type == value)


def _write_atomically(path: Path, table: pa.Table, schema: pa.Schema) -> None:
    """Write `table` so that `path` exists only complete, and durably before returning."""
    if not table.schema.equals(schema, check_metadata=True):
        raise SchemaMismatchError(
            f"{path.parent.name}/ rows do not have schema version {SCHEMA_VERSION}"
        )
    temp = path.with_name(f".{path.name}{_TEMP_SUFFIX}")
    with temp.open("wb") as sink:
        pq.write_table(table, sink, **parquet_options(schema))
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temp, path)
    _sync_directory(path.parent)


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    temp = path.with_name(f".{path.name}{_TEMP_SUFFIX}")
    with temp.open("w") as sink:
        json.dump(doc, sink, indent=2, sort_keys=True)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temp, path)
    _sync_directory(path.parent)


def _sync_directory(path: Path) -> None:
    """Make a rename durable, so the commit order survives a power loss too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if _PART.fullmatch(p.name))


def _discard_unfinished(root: Path) -> None:
    """Delete temporaries and the parts of a flush that never reached rollouts/."""
    committed = {p.name for p in _parts(root / "rollouts")}
    for name, _ in TABLES:
        for path in (root / name).iterdir():
            partial = path.name.endswith(_TEMP_SUFFIX)
            orphan = _PART.fullmatch(path.name) is not None and path.name not in committed
            if partial or orphan:
                path.unlink()
    (root / f".{MANIFEST}{_TEMP_SUFFIX}").unlink(missing_ok=True)


def _read_finished(root: Path) -> set[str]:
    finished: set[str] = set()
    for path in _parts(root / "rollouts"):
        ids = pq.read_table(path, columns=["rollout_id"]).column("rollout_id")
        finished.update(ids.to_pylist())
    return finished


def _next_part_number(root: Path) -> int:
    numbers = [
        int(match.group(1))
        for name, _ in TABLES
        for path in _parts(root / name)
        if (match := _PART.fullmatch(path.name))
    ]
    return max(numbers, default=-1) + 1


def _open_manifest(root: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest to keep: the caller's, stamped with the schema version.

    Reopening a directory (a resumed run) keeps the first run's `started_at` and
    refuses a directory written with another schema version: its parts would not mix.
    """
    doc: dict[str, Any] = {**manifest, "schema_version": SCHEMA_VERSION}
    doc.pop("ended_at", None)
    path = root / MANIFEST
    if path.exists():
        previous = json.loads(path.read_text())
        if previous.get("schema_version") != SCHEMA_VERSION:
            raise SchemaMismatchError(
                f"{root} holds schema version {previous.get('schema_version')!r}, "
                f"this writer writes {SCHEMA_VERSION}"
            )
        if "started_at" in previous:
            doc["started_at"] = previous["started_at"]
    _write_json(path, doc)
    return doc
