"""A task's own image as a root filesystem: built by Docker, unpacked once per node.

The container sandbox runs each trial over an overlayfs whose lower layer is the task's
image, read-only and shared by every trial of that image on the node. Docker is used
only to build (or pull) the image and to export its files; no trial runs in Docker.
Building and unpacking take seconds to minutes, so both happen once per image per node,
under a lock, and a finished root is found again by name:

    IMAGES_DIR/locks/<key>.lock   one build or unpack of a key at a time on this node
    IMAGES_DIR/logs/<key>.log     Docker's output for the key: the build (or pull), then
                                  the unpack, each command between a line naming it and
                                  one with its exit and time (a docker_image the daemon
                                  holds has none: nothing is built for it)
    IMAGES_DIR/roots/<hex>/       the root filesystem of image sha256:<hex>; complete
                                  whenever it exists (unpacked aside, then renamed)
    IMAGES_DIR/roots/<hex>.json   what it is: reference, digest, key, source, built_at,
                                  and config (the image's WORKDIR, ENV and USER, which
                                  the sandbox applies to what it runs)

A Dockerfile's key is the hash of its whole build context (`image_key`), so the same
environment gives the same image wherever a dataset put it. Roots are named by the
image's digest, so two contexts that build the same image share one root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harbor_ray.errors import EnvironmentBuildError, SandboxSetupError
from harbor_ray.trials.docker_cli import DockerCli, docker_problems
from harbor_ray.trials.environment_need import EnvironmentNeed, NeedKind
from harbor_ray.trials.rootfs_checks import missing_entries, refusal

__all__ = [
    "DEFAULT_IMAGES_DIR",
    "ImageConfig",
    "ImageRoot",
    "ImageSource",
    "docker_problems",
    "ensure_image_root",
    "image_key",
    "image_source",
]

DEFAULT_IMAGES_DIR = Path.home() / ".cache" / "harbor_ray" / "images"

# Images built from a Dockerfile are tagged with their key, so a daemon that holds the
# tag holds this content's build.
_REPOSITORY = "harbor-ray-env"
# Hashed ahead of a context: a change to what the key covers gives every context a new
# key, rather than an old image under a key that now means something else.
_KEY_FORMAT = b"harbor-ray image key 1\0"
_PARTIAL = ".partial-"


@dataclass(frozen=True)
class ImageSource:
    """What a task asks its environment to be: a Dockerfile to build, or an image by name."""

    dockerfile_dir: Path | None  # the task's environment/ when it holds a Dockerfile
    image: str | None  # task.toml's docker_image, when there is no Dockerfile


@dataclass(frozen=True)
class ImageConfig:
    """What the image sets for the processes run in it (its Dockerfile's WORKDIR, ENV
    and USER, as the daemon's `Config` holds them)."""

    workdir: str = ""  # "" when the image sets none
    env: tuple[tuple[str, str], ...] = ()  # in the image's order
    user: str = ""  # "" when the image sets none (root)

    @classmethod
    def from_docker(cls, config: dict[str, Any] | None) -> ImageConfig:
        """From `docker image inspect`'s `Config` (None for an image without one)."""
        config = config or {}
        env = [str(entry).partition("=") for entry in config.get("Env") or []]
        return cls(
            workdir=str(config.get("WorkingDir") or ""),
            env=tuple((name, value) for name, _, value in env if name),
            user=str(config.get("User") or ""),
        )

    def as_record(self) -> dict[str, Any]:
        return {"workdir": self.workdir, "env": dict(self.env), "user": self.user}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ImageConfig:
        return cls(workdir=record["workdir"], env=tuple(record["env"].items()), user=record["user"])


@dataclass(frozen=True)
class ImageRoot:
    """An image ready for the sandbox, and what it cost this call."""

    reference: str  # the tag built (harbor-ray-env:<key[:16]>) or the docker_image name
    digest: str  # the image's id as the daemon reports it, "sha256:..."
    rootfs: Path  # read-only root filesystem, shared by every trial of the image here
    build_s: float  # seconds this call spent building and unpacking (0.0 when cached)
    built: bool  # whether this call built or unpacked anything
    log: Path | None  # the build log kept for this image (None: a docker_image as is)
    config: ImageConfig  # what the image sets for what runs in it


def image_source(environment_dir: Path, need: EnvironmentNeed) -> ImageSource | None:
    """The image of the task whose environment directory is `environment_dir` and whose
    need (environment_need.read_need, which decides between a Dockerfile and a
    docker_image) is `need`; None when it declares no single image (none, or compose)."""
    if need.kind in (NeedKind.BASE, NeedKind.BUILD):
        return ImageSource(dockerfile_dir=environment_dir, image=None)
    if need.kind is NeedKind.IMAGE:
        return ImageSource(dockerfile_dir=None, image=need.image)
    return None


def image_key(dockerfile_dir: Path) -> str:
    """sha256 hex of the Dockerfile and its whole build context (relative paths, file
    modes, symlink targets and contents, in sorted order): the same content gives the
    same key wherever it lies.

    The whole directory counts, .dockerignore'd files included: a key that changes too
    often costs a build, one that changes too rarely serves a stale image.
    """
    digest = hashlib.sha256(_KEY_FORMAT)
    for relative in _context_paths(dockerfile_dir):
        path = dockerfile_dir / relative
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            kind, body = b"link", os.fsencode(os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            with path.open("rb") as file:
                kind, body = b"file", hashlib.file_digest(file, "sha256").digest()
        elif stat.S_ISDIR(info.st_mode):
            kind, body = b"dir", b""
        else:  # a fifo or socket: Docker refuses it, but it is part of the context
            kind, body = b"other", b""
        mode = b"%o" % stat.S_IMODE(info.st_mode)
        for field in (os.fsencode(relative), kind, mode, body):
            # Length-prefixed, so no two different contexts hash the same bytes.
            digest.update(len(field).to_bytes(8, "big") + field)
    return digest.hexdigest()


def _context_paths(top: Path) -> list[str]:
    """Every path under `top`, relative and sorted; symlinked directories not entered."""
    found: list[str] = []
    for directory, dirnames, filenames in os.walk(top):
        base = Path(directory).relative_to(top)
        found.extend((base / name).as_posix() for name in [*dirnames, *filenames])
    return sorted(found)


def _reference(key: str) -> str:
    return f"{_REPOSITORY}:{key[:16]}"


def _source_key(source: ImageSource) -> str:
    if source.dockerfile_dir is not None:
        return image_key(source.dockerfile_dir)
    if source.image:
        return hashlib.sha256(b"docker_image\0" + source.image.encode()).hexdigest()
    raise SandboxSetupError("an ImageSource names a Dockerfile directory or an image")


def _digest_hex(digest: str) -> str:
    algorithm, _, hex_digest = digest.partition(":")
    if (
        algorithm != "sha256"
        or len(hex_digest) != 64
        or not all(c in "0123456789abcdef" for c in hex_digest)
    ):
        raise EnvironmentBuildError(
            f"Docker reported an image id that is not a sha256 digest: {digest!r}"
        )
    return hex_digest


def ensure_image_root(
    source: ImageSource,
    images_dir: Path,
    *,
    timeout_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    docker: str = "docker",
) -> ImageRoot:
    """The image's root filesystem on this node, built and unpacked first if need be.

    Synchronous: callers run it in a thread. One build or unpack of an image at a time
    on a node (an flock per key): a second caller waits, then finds it done. Past
    `timeout_s` (for the whole call, the wait included) the running command is killed.
    Every failure is an EnvironmentBuildError naming the log and quoting its end.
    """
    cli = DockerCli(
        docker=docker,
        progress=progress or _silent,
        timeout_s=timeout_s,
        deadline=None if timeout_s is None else time.monotonic() + timeout_s,
    )
    call = _Build(cli)
    key = _source_key(source)
    for name in ("locks", "logs", "roots"):
        (images_dir / name).mkdir(parents=True, exist_ok=True)
    log = images_dir / "logs" / f"{key}.log"
    with cli.locked(images_dir / "locks" / f"{key}.lock", _named(source)):
        # Whoever holds the key's lock is its only unpacker: a partial root of the key
        # is the remains of a caller that was killed.
        for leftover in (images_dir / "roots").glob(f"{_PARTIAL}{key}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        began = time.monotonic()
        if source.dockerfile_dir is not None:
            reference = _reference(key)
            digest = cli.image_id(reference) or call.build(source.dockerfile_dir, reference, log)
        else:
            reference = str(source.image)
            digest = cli.image_id(reference) or call.pull(reference, log)
        # A docker_image the daemon held has no log unless it was pulled once.
        kept_log = log if log.exists() else None
        rootfs = images_dir / "roots" / _digest_hex(digest)
        if not rootfs.is_dir():
            call.unpack(reference, digest, rootfs, key, source, kept_log)
        config = call.recorded_config(rootfs, digest)
        build_s = time.monotonic() - began if call.ran else 0.0
    if call.ran:
        cli.progress(f"image {reference} ready in {build_s:.1f} s")
    return ImageRoot(
        reference=reference,
        digest=digest,
        rootfs=rootfs,
        build_s=build_s,
        built=call.ran,
        log=kept_log,
        config=config,
    )


def _silent(_line: str) -> None:
    return None


@dataclass
class _Build:
    """One ensure_image_root call's steps, over its Docker CLI (and its deadline)."""

    cli: DockerCli
    ran: bool = False  # whether a build, pull or unpack ran

    def config(self, digest: str) -> ImageConfig:
        """The image's config, as the daemon that built (or holds) it reports it."""
        found = self.cli.inspect(digest, "{{json .Config}}")
        if found is None:
            raise EnvironmentBuildError(
                f"the Docker daemon no longer holds image {digest}, whose WORKDIR, ENV and "
                "USER the sandbox needs: remove its root under the images directory "
                "(roots/) so that it is built again"
            )
        return ImageConfig.from_docker(json.loads(found))

    def recorded_config(self, rootfs: Path, digest: str) -> ImageConfig:
        """The config kept beside the root; read from the daemon (and kept) for a root
        unpacked before configs were kept."""
        note = rootfs.with_name(f"{rootfs.name}.json")
        record = json.loads(note.read_text())
        if "config" not in record:
            record["config"] = self.config(digest).as_record()
            note.write_text(json.dumps(record, indent=2) + "\n")
        return ImageConfig.from_record(record["config"])

    def build(self, dockerfile_dir: Path, reference: str, log: Path) -> str:
        self.cli.progress(f"building image for {dockerfile_dir} (log: {log})")
        log.write_bytes(b"")  # the log is the latest build's
        self.ran = True
        # --force-rm: a failed or killed step's container is removed too, not only
        # those of the steps that succeeded.
        docker = self.cli.docker
        self.cli.step(
            [
                [
                    docker,
                    "build",
                    "--force-rm",
                    "--network",
                    "host",
                    "-t",
                    reference,
                    str(dockerfile_dir),
                ]
            ],
            log,
            f"building the image of {dockerfile_dir}",
        )
        return self._found(reference, log)

    def pull(self, reference: str, log: Path) -> str:
        self.cli.progress(f"pulling {reference}: the Docker daemon does not hold it (log: {log})")
        log.write_bytes(b"")
        self.ran = True
        self.cli.step(
            [[self.cli.docker, "pull", reference]],
            log,
            f"docker_image {reference} is not held by this node's Docker daemon, and pulling it",
            fix="Put it on this node's daemon (`docker pull`, `docker load`) or give "
            "the task an environment/Dockerfile.",
        )
        return self._found(reference, log)

    def _found(self, reference: str, log: Path) -> str:
        digest = self.cli.image_id(reference)
        if digest is None:
            raise EnvironmentBuildError(
                f"Docker reported success but holds no image {reference} (log: {log})", log=str(log)
            )
        return digest

    def unpack(
        self,
        reference: str,
        digest: str,
        rootfs: Path,
        key: str,
        source: ImageSource,
        log: Path | None,
    ) -> None:
        """Export the image's files into `rootfs`: unpacked aside, checked, renamed."""
        self.cli.progress(f"unpacking {reference} ({digest[:19]}) into {rootfs}")
        self.ran = True
        partial = Path(tempfile.mkdtemp(prefix=f"{_PARTIAL}{key}-", dir=rootfs.parent))
        # Named by us, so that it is removed even when `docker create` was killed
        # before it could print the id.
        container = f"harbor-ray-unpack-{key[:16]}-{partial.name[-8:]}"
        try:
            try:
                self.cli.step(
                    [
                        [
                            self.cli.docker,
                            "create",
                            "--network",
                            "none",
                            "--name",
                            container,
                            digest,
                            "/bin/true",
                        ]
                    ],
                    log,
                    f"creating a container of {reference}",
                )
                self.cli.step(
                    [
                        [self.cli.docker, "export", container],
                        ["tar", "-x", "--numeric-owner", "-C", str(partial)],
                    ],
                    log,
                    f"unpacking {reference}",
                )
            finally:
                self.cli.remove(container)
            missing = missing_entries(partial)
            if missing:
                raise EnvironmentBuildError(
                    refusal(reference, missing), log=None if log is None else str(log)
                )
            record = {
                "reference": reference,
                "digest": digest,
                "key": key,
                "source": _named(source),
                "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "config": self.config(digest).as_record(),
            }
            # Written before the root appears, so a root always has its record.
            note = partial.with_name(f"{partial.name}.json")
            note.write_text(json.dumps(record, indent=2) + "\n")
            note.replace(rootfs.with_name(f"{rootfs.name}.json"))
            try:
                partial.rename(rootfs)
            except OSError:
                # Another key of the same image finished this root first.
                if not rootfs.is_dir():
                    raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def _named(source: ImageSource) -> str:
    return str(source.dockerfile_dir) if source.dockerfile_dir is not None else str(source.image)
