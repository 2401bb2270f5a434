"""Datasets that live elsewhere, fetched once into a local cache of real files.

Two spec kinds name a dataset that is not on this machine yet; the prefix marks them,
so a relative path such as `org/name` is never taken for one:

- `hf://ORG/NAME[@REVISION]`: a dataset repo on the Hugging Face hub (the one
  huggingface_hub talks to: `HF_ENDPOINT`), at a branch, tag or commit (default
  `main`). Its root is a task directory or a directory of task directories.
- `harbor://NAME[@VERSION][?registry=URL_OR_FILE]`: a dataset of Harbor's registry, or
  of the registry JSON at a URL or path. Harbor's own registry client lists it and its
  task client fetches each task (with git, for tasks that have a `git_url`). Without a
  version, the one Harbor picks when it is first fetched.

`fetch_dataset` downloads one into `<cache>/<kind>/<source>/<revision>/tasks/`, keyed
by the revision as written. It is staged in a hidden sibling directory and renamed into
place once complete, so an interrupted download is never taken as cached. Symbolic
links are replaced by the files they point to: Harbor uploads a task directory as a tar,
and a link into a download store would arrive dangling. `local_dataset` serves the cache
and fetches only what is missing; a machine that cannot fetch gets a `DatasetError` that
names `harbor-ray datasets prefetch` and local paths.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from harbor_ray.errors import DatasetError

__all__ = [
    "HUB_PREFIX",
    "REGISTRY_PREFIX",
    "CachedDataset",
    "HubDataset",
    "RegistryDataset",
    "cached_datasets",
    "default_cache_root",
    "fetch_dataset",
    "local_dataset",
    "materialise_links",
    "parse_remote_spec",
    "prefetch_datasets",
]

HUB_PREFIX = "hf://"
REGISTRY_PREFIX = "harbor://"
_REGISTRY_OPTION = "?registry="
_TASKS = "tasks"
_SOURCE_FILE = "source.json"
_HARBOR_REGISTRY_KEY = "harbor"
# The hub's own rule for an ORG/NAME repo id; it also keeps `..` out of cache paths.
_HUB_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


@dataclass(frozen=True)
class HubDataset:
    """A dataset repo on the Hugging Face hub, at a revision."""

    spec: str
    repo_id: str
    revision: str

    def cache_key(self) -> Path:
        return Path("hf", *self.repo_id.split("/"), _segment(self.revision))


@dataclass(frozen=True)
class RegistryDataset:
    """A dataset of Harbor's registry (`registry` None) or of a given registry JSON."""

    spec: str
    name: str
    version: str | None
    registry: str | None

    def cache_key(self) -> Path:
        source = _HARBOR_REGISTRY_KEY
        if self.registry is not None:
            source = hashlib.sha256(self._registry_location().encode()).hexdigest()[:16]
        version = _segment(self.version) if self.version else "latest"
        return Path("harbor", source, _segment(self.name), version)

    def _registry_location(self) -> str:
        assert self.registry is not None
        if "://" in self.registry:
            return self.registry
        return str(Path(self.registry).expanduser().resolve())


RemoteDataset = HubDataset | RegistryDataset


@dataclass(frozen=True)
class CachedDataset:
    """A dataset in the cache: the spec it was fetched for, where, when."""

    spec: str
    path: Path
    fetched_at: str


def parse_remote_spec(spec: str) -> RemoteDataset | None:
    """The remote dataset a spec names; None for specs of other kinds (local ones)."""
    if spec.startswith(HUB_PREFIX):
        repo_id, _, revision = spec.removeprefix(HUB_PREFIX).partition("@")
        if not _HUB_REPO_ID.fullmatch(repo_id):
            raise DatasetError(f"{spec!r}: a hub dataset is {HUB_PREFIX}ORG/NAME[@REVISION]")
        return HubDataset(spec=spec, repo_id=repo_id, revision=revision or "main")
    if spec.startswith(REGISTRY_PREFIX):
        dataset, _, registry = spec.removeprefix(REGISTRY_PREFIX).partition(_REGISTRY_OPTION)
        name, _, version = dataset.partition("@")
        if not name or "/" in name or (_REGISTRY_OPTION in spec and not registry):
            raise DatasetError(
                f"{spec!r}: a registry dataset is "
                f"{REGISTRY_PREFIX}NAME[@VERSION][{_REGISTRY_OPTION}URL_OR_FILE]"
            )
        return RegistryDataset(
            spec=spec, name=name, version=version or None, registry=registry or None
        )
    return None


def default_cache_root() -> Path:
    """`$XDG_CACHE_HOME/harbor_ray/datasets`, else `~/.cache/harbor_ray/datasets`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "harbor_ray" / "datasets"


def local_dataset(dataset: RemoteDataset, cache: Path) -> Path:
    """The dataset's task directory in the cache, fetched first (silently) if it is not."""
    return fetch_dataset(dataset, cache, progress=lambda _: None)


def fetch_dataset(dataset: RemoteDataset, cache: Path, progress: Callable[[str], None]) -> Path:
    """Download the dataset into the cache (unless it is there) and return its tasks dir."""
    entry = cache / dataset.cache_key()
    if (entry / _TASKS).is_dir():
        progress(f"{dataset.spec}: cached at {entry / _TASKS}")
        return entry / _TASKS
    entry.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{entry.name}.partial-", dir=entry.parent) as tmp:
        staged = Path(tmp) / "entry"
        tasks = staged / _TASKS
        tasks.mkdir(parents=True)
        progress(f"{dataset.spec}: fetching")
        try:
            if isinstance(dataset, HubDataset):
                _download_hub(dataset, tasks)
            else:
                _download_registry(dataset, tasks, progress)
        # The clients raise what their transports do (httpx, supabase, git, the hub's
        # own errors): all of them mean the same here, so they become one error.
        except Exception as error:
            raise DatasetError(_unfetchable(dataset, cache, error)) from error
        materialise_links(tasks)
        source = {"spec": dataset.spec, "fetched_at": datetime.now(UTC).isoformat()}
        (staged / _SOURCE_FILE).write_text(json.dumps(source) + "\n")
        try:
            staged.rename(entry)
        except OSError:
            # Another process finished the same dataset first; theirs is as good.
            if not (entry / _TASKS).is_dir():
                raise
    progress(f"{dataset.spec}: fetched in {time.monotonic() - started:.1f}s into {entry / _TASKS}")
    return entry / _TASKS


def prefetch_datasets(
    specs: Sequence[str], cache: Path, progress: Callable[[str], None]
) -> list[Path]:
    """Fetch each spec's dataset into the cache (`harbor-ray datasets prefetch`).

    Every spec is checked before anything is fetched: a local one needs no prefetch.
    """
    datasets = [(spec, parse_remote_spec(spec)) for spec in specs]
    local = [spec for spec, dataset in datasets if dataset is None]
    if local:
        raise DatasetError(
            f"not a hub or registry dataset ({HUB_PREFIX}... or {REGISTRY_PREFIX}...): "
            f"{', '.join(local)}; a local path needs no prefetch"
        )
    return [
        fetch_dataset(dataset, cache, progress) for _, dataset in datasets if dataset is not None
    ]


def cached_datasets(cache: Path) -> list[CachedDataset]:
    """Every complete dataset in the cache, by spec."""
    found = []
    # Every entry is <kind>/<source>/<name>/<revision>: no need to walk the tasks' files.
    for source in cache.glob(f"*/*/*/*/{_SOURCE_FILE}"):
        if (source.parent / _TASKS).is_dir():
            record = json.loads(source.read_text())
            found.append(
                CachedDataset(
                    spec=record["spec"],
                    path=source.parent / _TASKS,
                    fetched_at=record["fetched_at"],
                )
            )
    return sorted(found, key=lambda item: item.spec)


def _download_hub(dataset: HubDataset, target: Path) -> None:
    from huggingface_hub import snapshot_download

    # local_dir: real files laid out as in the repo, not links into the hub's blob store.
    # HF_ENDPOINT is read now: huggingface_hub reads it once, when first imported.
    snapshot_download(
        dataset.repo_id,
        repo_type="dataset",
        revision=dataset.revision,
        local_dir=target,
        endpoint=os.environ.get("HF_ENDPOINT"),
    )
    # huggingface_hub's bookkeeping for local_dir downloads, not part of the dataset.
    shutil.rmtree(target / ".cache", ignore_errors=True)


def _download_registry(
    dataset: RegistryDataset, target: Path, progress: Callable[[str], None]
) -> None:
    from harbor.registry.client.factory import RegistryClientFactory

    if dataset.registry is None:
        client = RegistryClientFactory.create()
    elif "://" in dataset.registry:
        client = RegistryClientFactory.create(registry_url=dataset.registry)
    else:
        client = RegistryClientFactory.create(registry_path=Path(dataset.registry).expanduser())
    name = f"{dataset.name}@{dataset.version}" if dataset.version else dataset.name
    items = asyncio.run(
        client.download_dataset(
            name,
            output_dir=target,
            export=True,
            on_total_known=lambda count: progress(f"{dataset.spec}: {count} tasks"),
            on_task_download_complete=lambda task, _: progress(
                f"{dataset.spec}: {task.get_name()} fetched"
            ),
        )
    )
    for item in items:
        # A registry entry without a git_url is a local directory Harbor leaves in place.
        copy = target / item.downloaded_path.name
        if not copy.exists():
            shutil.copytree(item.downloaded_path, copy)


def materialise_links(root: Path) -> None:
    """Replace every symbolic link under root by a copy of what it points to."""
    for directory, dirs, files in root.walk():
        for name in [*dirs, *files]:
            link = directory / name
            if not link.is_symlink():
                continue
            target = link.resolve()
            if not target.exists():
                raise DatasetError(f"{link} is a link to {target}, which does not exist")
            link.unlink()
            if target.is_dir():
                shutil.copytree(target, link)
            else:
                shutil.copy2(target, link)


def _segment(text: str) -> str:
    """One path segment for any text: no `/`, and never `.` or `..`."""
    quoted = quote(text, safe="")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def _unfetchable(dataset: RemoteDataset, cache: Path, error: Exception) -> str:
    reason = " ".join(str(error).split()) or type(error).__name__
    return (
        f"{dataset.spec} is not in the dataset cache {cache} and fetching it failed: "
        f"{reason}. On a machine without the network, run `harbor-ray datasets prefetch "
        f"{dataset.spec}` where there is one and copy {cache} over, or give a local "
        "path (a task directory or a directory of them)."
    )
