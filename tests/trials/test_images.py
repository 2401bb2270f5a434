"""The task's image as a root filesystem (trials/images.py), against the real Docker daemon.

Each test's build context holds a file of its own (`nonce`), so its key and tag are its
own and removing them at the end touches no other test's image, while Docker's layer
cache still serves the RUN steps that several tests share. Without a daemon the Docker
tests fail, naming the fix; they never skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harbor_ray.errors import EnvironmentBuildError
from harbor_ray.trials.environment_need import read_need
from harbor_ray.trials.images import (
    ImageRoot,
    ImageSource,
    docker_problems,
    ensure_image_root,
    image_key,
    image_source,
)
from harbor_ray.trials.rootfs_checks import missing_entries

BASE = "debian:bookworm-slim"
APP = f"FROM {BASE}\nRUN mkdir -p /app && echo 42 > /app/x\n"


# --- keys and sources: no Docker ---------------------------------------------------------


def context(directory: Path) -> Path:
    """A build context with a Dockerfile, a script, a subdirectory and a symlink."""
    (directory / "files").mkdir(parents=True)
    (directory / "Dockerfile").write_text(APP)
    (directory / "files" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (directory / "files" / "run.sh").chmod(0o755)
    (directory / "latest").symlink_to("files/run.sh")
    return directory


def test_the_same_content_in_two_directories_has_one_key(tmp_path: Path) -> None:
    assert image_key(context(tmp_path / "one")) == image_key(context(tmp_path / "two"))


def test_a_byte_a_mode_a_file_or_a_link_more_changes_the_key(tmp_path: Path) -> None:
    directory = context(tmp_path / "environment")
    keys = [image_key(directory)]
    (directory / "files" / "run.sh").write_text("#!/bin/sh\necho ho\n")
    keys.append(image_key(directory))
    (directory / "files" / "run.sh").chmod(0o644)
    keys.append(image_key(directory))
    (directory / "files" / "more").write_text("")
    keys.append(image_key(directory))
    (directory / "latest").unlink()
    (directory / "latest").symlink_to("files/more")
    keys.append(image_key(directory))
    (directory / "empty").mkdir()
    keys.append(image_key(directory))
    assert len(set(keys)) == len(keys)
    assert all(len(key) == 64 and int(key, 16) >= 0 for key in keys)


def test_a_dockerfile_wins_over_a_docker_image(tmp_path: Path) -> None:
    def source(docker_image: str | None) -> ImageSource | None:
        return image_source(tmp_path, read_need(tmp_path, docker_image))

    assert source(None) is None
    assert source("ubuntu:24.04") == ImageSource(None, "ubuntu:24.04")
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\n")  # a base only
    assert source("ubuntu:24.04") == ImageSource(tmp_path, None)
    (tmp_path / "Dockerfile").write_text(APP)
    assert source("ubuntu:24.04") == ImageSource(tmp_path, None)
    (tmp_path / "docker-compose.yaml").write_text("services: {}\n")  # not one image
    assert source("ubuntu:24.04") is None


def test_entries_are_resolved_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    for name in ("bash", "env", "setpriv", "tar"):
        (root / "usr" / "bin" / name).write_text("")
        (root / "usr" / "bin" / name).chmod(0o755)
    (root / "bin").symlink_to("/usr/bin")  # absolute: from the root's top, not the host's
    assert missing_entries(root) == []

    (root / "usr" / "bin" / "env").chmod(0o644)  # not a program
    (root / "usr" / "bin" / "setpriv").unlink()
    (root / "usr" / "bin" / "setpriv").symlink_to("/usr/bin/true")  # only on the host
    (root / "usr" / "bin" / "tar").unlink()
    (root / "usr" / "bin" / "tar").symlink_to("tar")  # a loop
    assert missing_entries(root) == ["/usr/bin/env", "/usr/bin/setpriv", "tar"]


# --- building and unpacking: the real daemon ---------------------------------------------


@pytest.fixture(scope="module")
def made() -> Iterator[list[str]]:
    """The tags this module's tests made, removed at its end; fails without a daemon."""
    problems = docker_problems()
    if problems:
        pytest.fail("Docker cannot build images here:\n" + "\n".join(problems))
    tags: list[str] = []
    yield tags
    if tags:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, check=False)


@pytest.fixture
def images_dir(tmp_path: Path, made: list[str]) -> Iterator[Path]:
    # Each root is a whole Debian (~200 MB): not kept with pytest's last three runs.
    yield tmp_path / "images"
    shutil.rmtree(tmp_path / "images", ignore_errors=True)


def environment(parent: Path, made: list[str], dockerfile: str = APP) -> ImageSource:
    """A Dockerfile context of this test's own, its future tag noted for removal."""
    directory = parent / f"environment-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True)
    (directory / "Dockerfile").write_text(dockerfile)
    (directory / "nonce").write_text(uuid.uuid4().hex)
    made.append(f"harbor-ray-env:{image_key(directory)[:16]}")
    return ImageSource(dockerfile_dir=directory, image=None)


def image_id(reference: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def unpack_containers(source: ImageSource) -> list[str]:
    """The containers left by unpacks of this source (others may be unpacking theirs)."""
    assert source.dockerfile_dir is not None
    name = f"name=harbor-ray-unpack-{image_key(source.dockerfile_dir)[:16]}"
    return subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", name], capture_output=True, text=True, check=True
    ).stdout.split()


def left_in(images_dir: Path) -> list[str]:
    """What the roots directory holds besides finished roots and their records."""
    return [path.name for path in (images_dir / "roots").iterdir() if path.name.startswith(".")]


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, made: list[str]
) -> Iterator[tuple[ImageSource, Path, ImageRoot, list[str]]]:
    """One image built from a Dockerfile, for the tests that read it."""
    tmp = tmp_path_factory.mktemp("built")
    source, lines = environment(tmp, made), []
    root = ensure_image_root(source, tmp / "images", progress=lines.append)
    yield source, tmp / "images", root, lines
    shutil.rmtree(tmp / "images", ignore_errors=True)


@pytest.mark.integration
def test_a_dockerfile_builds_into_a_root_filesystem(
    built: tuple[ImageSource, Path, ImageRoot, list[str]],
) -> None:
    source, images_dir, root, lines = built
    assert source.dockerfile_dir is not None
    key = image_key(source.dockerfile_dir)
    assert root.reference == f"harbor-ray-env:{key[:16]}"
    assert root.digest == image_id(root.reference)
    assert root.rootfs == images_dir / "roots" / root.digest.removeprefix("sha256:")
    assert (root.rootfs / "app" / "x").read_text() == "42\n"
    assert root.built and root.build_s > 0
    record = json.loads(root.rootfs.with_name(f"{root.rootfs.name}.json").read_text())
    assert record["reference"] == root.reference and record["digest"] == root.digest
    assert record["key"] == key and record["source"] == str(source.dockerfile_dir)
    # What the image sets for its processes, kept with it (Docker's default PATH here).
    assert record["config"] == root.config.as_record()
    assert dict(root.config.env)["PATH"].endswith("/usr/bin:/sbin:/bin")
    assert root.log == images_dir / "logs" / f"{key}.log"
    log = root.log.read_text()
    assert "$ docker build --force-rm --network host -t" in log and "# exit 0 after" in log
    assert "Successfully tagged" in log
    assert [line.split(" ")[0] for line in lines] == ["building", "unpacking", "image"]
    assert str(root.log) in lines[0] and str(root.rootfs) in lines[1]
    assert unpack_containers(source) == [] and left_in(images_dir) == []


@pytest.mark.integration
def test_a_second_call_is_cached(built: tuple[ImageSource, Path, ImageRoot, list[str]]) -> None:
    source, images_dir, first, _ = built
    assert first.log is not None
    written = first.log.stat().st_mtime_ns, first.log.read_bytes()
    lines: list[str] = []
    began = time.monotonic()
    again = ensure_image_root(source, images_dir, progress=lines.append)
    assert time.monotonic() - began < 5
    assert again == ImageRoot(
        reference=first.reference,
        digest=first.digest,
        rootfs=first.rootfs,
        build_s=0.0,
        built=False,
        log=first.log,
        config=first.config,
    )
    assert (first.log.stat().st_mtime_ns, first.log.read_bytes()) == written
    assert lines == []


@pytest.mark.integration
def test_a_root_kept_without_its_config_gets_it_from_the_daemon(
    built: tuple[ImageSource, Path, ImageRoot, list[str]],
) -> None:
    """A root unpacked before configs were kept: its config is read once and kept."""
    source, images_dir, first, _ = built
    note = first.rootfs.with_name(f"{first.rootfs.name}.json")
    record = json.loads(note.read_text())
    del record["config"]
    note.write_text(json.dumps(record))
    assert ensure_image_root(source, images_dir).config == first.config
    assert json.loads(note.read_text())["config"] == first.config.as_record()


@pytest.mark.integration
def test_a_killed_unpack_is_removed_by_the_next_caller(
    built: tuple[ImageSource, Path, ImageRoot, list[str]],
) -> None:
    source, images_dir, first, _ = built
    assert source.dockerfile_dir is not None
    leftover = images_dir / "roots" / f".partial-{image_key(source.dockerfile_dir)}-killed"
    (leftover / "usr").mkdir(parents=True)
    assert ensure_image_root(source, images_dir).rootfs == first.rootfs
    assert not leftover.exists()


@pytest.mark.integration
def test_two_callers_at_once_build_once(tmp_path: Path, images_dir: Path, made: list[str]) -> None:
    source = environment(tmp_path, made)
    start = threading.Barrier(2)
    roots: list[ImageRoot] = []
    lines: list[str] = []

    def call() -> None:
        start.wait()
        roots.append(ensure_image_root(source, images_dir, progress=lines.append))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(roots) == 2
    assert sorted(root.built for root in roots) == [False, True]
    assert roots[0].rootfs == roots[1].rootfs and (roots[0].rootfs / "app" / "x").is_file()
    assert sum(line.startswith("waiting for another build") for line in lines) == 1
    assert sum(line.startswith("building image") for line in lines) == 1
    assert sum(line.startswith("unpacking") for line in lines) == 1
    assert roots[0].log is not None
    assert roots[0].log.read_text().count("$ docker build") == 1


@pytest.mark.integration
def test_a_failing_build_names_its_log(tmp_path: Path, images_dir: Path, made: list[str]) -> None:
    source = environment(tmp_path, made, f"FROM {BASE}\nRUN echo about to fail && false\n")
    with pytest.raises(EnvironmentBuildError) as raised:
        ensure_image_root(source, images_dir)
    log = raised.value.log
    assert log is not None and Path(log).is_file()
    message = str(raised.value)
    assert f"(log: {log})" in message
    assert "returned a non-zero code: 1" in message  # docker's own words, quoted
    assert "legacy builder is deprecated" not in message  # its notice is no cause
    assert "about to fail" in Path(log).read_text()
    assert list((images_dir / "roots").iterdir()) == []


@pytest.mark.integration
def test_a_build_past_its_timeout_is_killed(
    tmp_path: Path, images_dir: Path, made: list[str]
) -> None:
    source = environment(tmp_path, made, f"FROM {BASE}\nRUN sleep 600\n")
    began = time.monotonic()
    with pytest.raises(EnvironmentBuildError, match="took longer than the 3 s allowed"):
        ensure_image_root(source, images_dir, timeout_s=3)
    assert time.monotonic() - began < 15
    # The daemon stops the build's container once its client is gone.
    deadline = time.monotonic() + 30
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _sleepers() == []


def _sleepers() -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.ID}} {{.Command}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in listed.splitlines() if "sleep 600" in line]


@pytest.mark.integration
def test_a_docker_image_the_daemon_holds_is_used_as_is(images_dir: Path) -> None:
    lines: list[str] = []
    root = ensure_image_root(ImageSource(None, BASE), images_dir, progress=lines.append)
    assert root.reference == BASE and root.digest == image_id(BASE)
    assert root.log is None and root.built
    assert (root.rootfs / "etc" / "debian_version").is_file()
    assert missing_entries(root.rootfs) == []  # merged /usr: /bin -> usr/bin
    assert not any(line.startswith(("building", "pulling")) for line in lines)
    again = ensure_image_root(ImageSource(None, BASE), images_dir)
    assert (again.built, again.build_s, again.rootfs) == (False, 0.0, root.rootfs)


@pytest.mark.integration
def test_an_unknown_docker_image_fails_fast(images_dir: Path, made: list[str]) -> None:
    name = f"harbor-ray-test/no-such-image:{uuid.uuid4().hex[:12]}"
    began = time.monotonic()
    with pytest.raises(EnvironmentBuildError) as raised:
        ensure_image_root(ImageSource(None, name), images_dir, timeout_s=120)
    assert time.monotonic() - began < 60
    assert raised.value.log is not None and Path(raised.value.log).is_file()
    assert name in str(raised.value) and raised.value.log in str(raised.value)
    assert "pulling it failed" in str(raised.value) and "docker load" in str(raised.value)


@pytest.mark.integration
def test_an_image_without_setpriv_is_refused(
    tmp_path: Path, images_dir: Path, made: list[str]
) -> None:
    source = environment(tmp_path, made, f"FROM {BASE}\nRUN rm /usr/bin/setpriv\n")
    with pytest.raises(EnvironmentBuildError) as raised:
        ensure_image_root(source, images_dir)
    message = str(raised.value)
    assert "has no /usr/bin/setpriv:" in message and "install util-linux" in message
    assert list((images_dir / "roots").iterdir()) == []  # not kept for the next caller
    assert unpack_containers(source) == []


def test_a_missing_cli_is_named_with_its_fix(tmp_path: Path) -> None:
    problems = docker_problems(str(tmp_path / "no-docker"))
    assert len(problems) == 1 and "apt-get install docker.io" in problems[0]
