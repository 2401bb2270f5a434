"""Hub and registry datasets fetched into the cache, against local stand-ins: a hub
speaking huggingface_hub's snapshot API on loopback, and a registry JSON whose tasks
live in local git repos. Nothing here reaches the real hub or Harbor's registry."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harbor_ray.errors import DatasetError
from harbor_ray.trials.dataset_cache import (
    HubDataset,
    RegistryDataset,
    cached_datasets,
    fetch_dataset,
    materialise_links,
    parse_remote_spec,
)
from harbor_ray.trials.datasets import resolve_dataset
from tests.trials.hub_standin import HubRepo, serve_hub
from tests.trials.test_datasets import dataset, write_registry, write_task


def task_files(name: str) -> dict[str, bytes]:
    """A task's files as a hub repo holds them, under `name/`."""
    return {
        f"{name}/task.toml": b"[agent]\ntimeout_sec = 30.0\n\n[verifier]\ntimeout_sec = 20.0\n",
        f"{name}/instruction.md": b"Do the thing.\n",
        f"{name}/environment/Dockerfile": b"FROM debian:bookworm-slim\n",
        f"{name}/tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        f"{name}/solution/solve.sh": b"#!/bin/bash\ntrue\n",
    }


def links_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_symlink()]


# --- Specs -----------------------------------------------------------------------------


def test_marked_specs_parse_and_unmarked_ones_stay_local() -> None:
    assert parse_remote_spec("hf://org/tasks@v1") == HubDataset(
        spec="hf://org/tasks@v1", repo_id="org/tasks", revision="v1"
    )
    assert parse_remote_spec("hf://org/tasks").revision == "main"  # type: ignore[union-attr]
    assert parse_remote_spec("harbor://demo@1.0?registry=reg.json") == RegistryDataset(
        spec="harbor://demo@1.0?registry=reg.json", name="demo", version="1.0", registry="reg.json"
    )
    assert parse_remote_spec("harbor://demo") == RegistryDataset(
        spec="harbor://demo", name="demo", version=None, registry=None
    )
    for local in ("org/tasks", "samples", "reg.json:demo@1.0", "terminal-bench@2.0"):
        assert parse_remote_spec(local) is None


@pytest.mark.parametrize(
    "spec", ["hf://tasks", "hf://a/b/c", "hf://../x", "harbor://", "harbor://x?registry="]
)
def test_malformed_marked_specs_are_refused(spec: str) -> None:
    with pytest.raises(DatasetError, match="is "):
        parse_remote_spec(spec)


def test_registry_datasets_are_keyed_by_registry_name_and_version(tmp_path: Path) -> None:
    default = parse_remote_spec("harbor://demo@1.0")
    given = parse_remote_spec(f"harbor://demo@1.0?registry={tmp_path / 'r.json'}")
    latest = parse_remote_spec("harbor://demo")
    assert default is not None and given is not None and latest is not None
    assert default.cache_key() == Path("harbor/harbor/demo/1.0")
    assert given.cache_key().parts[-2:] == ("demo", "1.0") != default.cache_key()
    assert latest.cache_key().name == "latest"
    # No spec reaches outside its entry of the cache.
    for spec in ("harbor://..@..", "hf://org/x@..", "hf://org/x@refs/pr/1"):
        remote = parse_remote_spec(spec)
        assert remote is not None
        assert ".." not in remote.cache_key().parts and len(remote.cache_key().parts) == 4


# --- The hub ---------------------------------------------------------------------------


@pytest.fixture
def hub_repo() -> HubRepo:
    return HubRepo(
        files={**task_files("alpha"), **task_files("beta"), "README.md": b"hi\n"},
        revisions=("main", "v1"),
    )


def test_a_hub_dataset_resolves_from_real_files_and_then_from_the_cache(
    tmp_path: Path, hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    with serve_hub({"org/tasks": hub_repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        report = resolve_dataset("hf://org/tasks@v1", cache=cache)
    assert [task.name for task in report.tasks] == ["alpha", "beta"]
    assert not report.problems
    fetched = cache / "hf" / "org" / "tasks" / "v1" / "tasks"
    assert report.tasks[0].path == fetched / "alpha"
    assert (fetched / "alpha" / "tests" / "test.sh").read_bytes().startswith(b"#!/bin/bash")
    assert links_under(cache) == []
    assert not (fetched / ".cache").exists()
    assert any("/resolve/" in path for path in hub.requests)

    # The stand-in is stopped: the second resolve never leaves the cache.
    asked = len(hub.requests)
    again = resolve_dataset("hf://org/tasks@v1", cache=cache)
    assert again.tasks == report.tasks and len(hub.requests) == asked
    assert [(entry.spec, entry.path) for entry in cached_datasets(cache)] == [
        ("hf://org/tasks@v1", fetched)
    ]


def test_an_unfetchable_hub_dataset_names_prefetch_and_leaves_nothing_cached(
    tmp_path: Path, hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_hub({"org/tasks": hub_repo}) as hub:
        gone = hub.url  # listening no more once the block ends
    monkeypatch.setenv("HF_ENDPOINT", gone)
    cache = tmp_path / "cache"

    with pytest.raises(DatasetError, match="harbor-ray datasets prefetch hf://org/tasks") as error:
        resolve_dataset("hf://org/tasks", cache=cache)

    assert "local path" in str(error.value)
    assert cached_datasets(cache) == []
    assert list((cache / "hf" / "org" / "tasks").iterdir()) == []  # no partial left behind


def test_prefetch_reports_progress_and_skips_what_is_cached(
    tmp_path: Path, hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    spec = parse_remote_spec("hf://org/tasks")
    assert spec is not None
    with serve_hub({"org/tasks": hub_repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = fetch_dataset(spec, tmp_path, progress=said.append)
        asked = len(hub.requests)
        second = fetch_dataset(spec, tmp_path, progress=said.append)
    assert first == second and len(hub.requests) == asked
    assert said[0] == "hf://org/tasks: fetching"
    assert said[1].startswith("hf://org/tasks: fetched in ")
    assert said[2].startswith("hf://org/tasks: cached at ")


def test_a_snapshot_of_links_into_a_blob_store_becomes_real_files(tmp_path: Path) -> None:
    """The layout huggingface_hub's own cache uses: snapshot entries link into blobs/."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "1a2b").write_text("[verifier]\ntimeout_sec = 1.0\n")
    (blobs / "3c4d").write_text("echo 1\n")
    shared = tmp_path / "shared-tests"
    shared.mkdir()
    (shared / "test.sh").symlink_to(blobs / "3c4d")
    snapshot = tmp_path / "snapshot" / "task"
    snapshot.mkdir(parents=True)
    (snapshot / "task.toml").symlink_to(Path("../../blobs/1a2b"))
    (snapshot / "tests").symlink_to(shared)

    materialise_links(tmp_path / "snapshot")

    assert links_under(tmp_path / "snapshot") == []
    for store in (blobs, shared):
        for item in store.iterdir():
            item.unlink()
    assert (snapshot / "task.toml").read_text().startswith("[verifier]")
    assert (snapshot / "tests" / "test.sh").read_text() == "echo 1\n"


def test_a_dangling_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "task.toml").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="does not exist"):
        materialise_links(tmp_path)


# --- A registry of git repos -----------------------------------------------------------


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_registry_dataset_is_fetched_with_harbors_clients_and_then_cached(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    write_task(repo / "tasks" / "alpha")
    write_task(repo / "tasks" / "beta")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "tasks", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo)
    entries = [
        {"name": name, "git_url": repo.as_uri(), "git_commit_id": commit, "path": f"tasks/{name}"}
        for name in ("beta", "alpha")
    ]
    registry = write_registry(tmp_path / "registry.json", [dataset("demo", "1.0", entries)])
    spec = f"harbor://demo@1.0?registry={registry}"
    cache = tmp_path / "cache"

    report = resolve_dataset(spec, cache=cache)

    assert [task.name for task in report.tasks] == ["alpha", "beta"]
    assert all(task.path.is_relative_to(cache) for task in report.tasks)
    assert links_under(cache) == []
    # The git repo and the registry gone, the cache still serves it.
    subprocess.run(["rm", "-rf", str(repo), str(registry)], check=True)
    assert resolve_dataset(spec, cache=cache).tasks == report.tasks
    assert [entry.spec for entry in cached_datasets(cache)] == [spec]


def test_an_unknown_registry_dataset_names_prefetch(tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "registry.json", [dataset("demo", "1.0", [])])
    with pytest.raises(DatasetError, match=r"prefetch harbor://nope@1\.0"):
        resolve_dataset(f"harbor://nope@1.0?registry={registry}", cache=tmp_path / "cache")


@pytest.mark.parametrize("spec", ["terminal-bench@2.0", "https://example.com/registry.json"])
def test_unmarked_remote_specs_are_refused_and_point_at_the_marks(spec: str) -> None:
    with pytest.raises(DatasetError, match="needs the network") as error:
        resolve_dataset(spec)
    assert "hf://ORG/NAME[@REVISION] or harbor://NAME[@VERSION]" in str(error.value)
