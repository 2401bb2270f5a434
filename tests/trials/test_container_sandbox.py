"""The container sandbox: the bubblewrap sandbox over the task's own image, with real
bwrap, a real overlay, real cgroups and an image really built and unpacked by
trials/images.py (Docker's layer cache serves the build where it ran before).

What is left is read from the host itself (/proc, its mount table, /sys/fs/cgroup, the
file system), not from the sandbox's bookkeeping. Without Docker, overlayfs or writable
cgroups the tests fail, naming what is missing; they never skip.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig
from harbor.models.trial.paths import TrialPaths
from harbor.trial.trial import Trial

from harbor_ray.errors import EnvironmentUnsupportedError, SandboxError
from harbor_ray.trials.images import ImageRoot, ImageSource, ensure_image_root
from harbor_ray.trials.sandbox.container import ContainerEnvironment
from harbor_ray.trials.sandbox.leftovers import reap
from harbor_ray.trials.sandbox.limits import (
    CGROUP_ROOT,
    Cgroups,
    Limits,
    cgroup_name,
    is_v2,
    settings,
)
from harbor_ray.trials.sandbox.pooled import BwrapBackend, register_pool, unregister_pool
from harbor_ray.trials.sandbox.preflight import overlay_problems
from harbor_ray.trials.sandbox.processes import pids_in_pid_namespace
from harbor_ray.trials.warm_pool import Ledger, WarmPool
from tests.trials.test_bwrap_sandbox import make_environment, pid_namespace_of, running
from tests.waiting import eventually

# Real Docker builds, bwrap, overlays and cgroups: with the other tests of real
# components, never beside them in the unit run (scripts/test).
pytestmark = pytest.mark.integration

IMPORT_PATH = "harbor_ray.trials.sandbox.container:ContainerEnvironment"
# Debian's jq, python3 (the forwards' relay runs it) and tmux, a file of the task's, and
# variables the task's commands rely on: one of its own, and a PATH with its tool.
DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends jq python3 tmux"
    " && rm -rf /var/lib/apt/lists/*\n"
    "RUN mkdir -p /app /opt/task/bin && echo '{\"answer\": 42}' > /app/data.json"
    " && printf '#!/bin/sh\\necho task tool\\n' > /opt/task/bin/task-tool"
    " && chmod +x /opt/task/bin/task-tool\n"
    "ENV TASK_DATA=/app/data.json PATH=/opt/task/bin:$PATH\n"
    "WORKDIR /app\n"
)


@dataclass(frozen=True)
class Image:
    environment: Path  # the task's environment/, its Dockerfile
    images_dir: Path
    root: ImageRoot


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The image, built (or found in Docker) and unpacked once for the module."""
    base = tmp_path_factory.mktemp("image")
    environment = base / "environment"
    environment.mkdir()
    (environment / "Dockerfile").write_text(DOCKERFILE)
    root = ensure_image_root(ImageSource(environment, None), base / "images")
    return Image(environment, base / "images", root)


def make_container(
    tmp_path: Path,
    image: Image,
    name: str = "task",
    *,
    task_env: TaskEnvironmentConfig | None = None,
    **kwargs: Any,
) -> ContainerEnvironment:
    return ContainerEnvironment(
        environment_dir=image.environment,
        environment_name=name,
        session_id=f"{name}__env",
        trial_paths=TrialPaths(tmp_path / name / "trial"),
        task_env_config=task_env or TaskEnvironmentConfig(),
        sandboxes_dir=tmp_path / "sandboxes",
        images_dir=image.images_dir,
        **kwargs,
    )


@pytest.fixture
async def container(tmp_path: Path, image: Image) -> AsyncIterator[ContainerEnvironment]:
    environment = make_container(tmp_path, image)
    await environment.start(force_build=False)
    yield environment
    await environment.stop(delete=True)


def snapshot(root: Path) -> set[tuple[str, int, int, int]]:
    """Every path under `root` with its mode, size and modification time."""
    found = set()
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            found.add((path, info.st_mode, info.st_size, info.st_mtime_ns))
    return found


def mounted_below(directory: Path) -> list[str]:
    """The host's mounts (this process's mount table) at or below `directory`."""
    return [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(directory) in line.split()[4]
    ]


def sandboxed(marker: str) -> list[str]:
    """The command lines of the sleeps and tmux servers that carry `marker`."""
    return [line for line in running(marker) if line.split()[0] in ("sleep", "tmux")]


def cgroups_of(environment: ContainerEnvironment, limits: Limits) -> list[Path]:
    """The cgroups the sandbox's limits are in (computed from its directory)."""
    assert environment.sandbox_dir is not None
    return Cgroups(environment.sandbox_dir, limits).groups


# --- The image -------------------------------------------------------------------------


async def test_the_images_files_and_programs_are_what_runs(
    container: ContainerEnvironment, image: Image
) -> None:
    result = await container.exec(
        "jq .answer /app/data.json; python3 --version; pwd; "
        ". /etc/os-release; echo $VERSION_CODENAME; id -u; echo $TASK_DATA; task-tool"
    )
    assert result.return_code == 0, result.stderr
    # Debian bookworm's python3, whatever the host runs; the image's WORKDIR; its ENV,
    # PATH included.
    assert result.stdout == ("42\nPython 3.11.2\n/app\nbookworm\n0\n/app/data.json\ntask tool\n")
    record = json.loads((container.trial_paths.trial_dir / "environment.json").read_text())
    assert record == {
        "kind": "image",
        "reference": image.root.reference,
        "digest": image.root.digest,
        "build_s": 0.0,
        "built": False,
        "log": None if image.root.log is None else str(image.root.log),
    }


async def test_the_local_sandbox_records_the_hosts_userland(tmp_path: Path) -> None:
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    try:
        record = (environment.trial_paths.trial_dir / "environment.json").read_text()
        assert json.loads(record) == {"kind": "host"}
    finally:
        await environment.stop(delete=True)


async def test_writes_land_in_the_trials_own_layer_never_in_the_image(
    tmp_path: Path, image: Image
) -> None:
    before = snapshot(image.root.rootfs)
    first = make_container(tmp_path, image, "first")
    second = make_container(tmp_path, image, "second")
    await asyncio.gather(first.start(force_build=False), second.start(force_build=False))
    try:
        wrote = await first.exec(
            "echo first > /app/owner && touch /usr/bin/planted && "
            "rm /app/data.json && echo x >> /etc/hostname"
        )
        assert wrote.return_code == 0, wrote.stderr
        assert first.sandbox_dir is not None
        upper = first.sandbox_dir / "upper"
        assert (upper / "app" / "owner").read_text() == "first\n"
        assert (upper / "usr" / "bin" / "planted").is_file()
        seen = await second.exec("ls /app; ls /usr/bin/planted")
        assert seen.stdout == "data.json\n"
        assert "No such file" in (seen.stderr or "")
        assert (await first.exec("ls /app")).stdout == "owner\n"
    finally:
        await asyncio.gather(first.stop(delete=True), second.stop(delete=True))
    assert snapshot(image.root.rootfs) == before


# --- Network ---------------------------------------------------------------------------


async def test_no_network_but_loopback_and_the_forward(tmp_path: Path, image: Image) -> None:
    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    environment = make_container(tmp_path, image, forward={8765: f"127.0.0.1:{port}"})
    await environment.start(force_build=False)
    try:
        interfaces = await environment.exec("tail -n +3 /proc/net/dev | cut -d: -f1")
        assert (interfaces.stdout or "").split() == ["lo"]
        direct = await environment.exec(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout_sec=10
        )
        assert direct.return_code != 0 and direct.stdout is None
        forwarded = await environment.exec("cat < /dev/tcp/127.0.0.1/8765", timeout_sec=10)
        assert forwarded.stdout == "hello from the host\n", forwarded.stderr
    finally:
        await environment.stop(delete=True)
        server.close()
        await server.wait_closed()


# --- Teardown --------------------------------------------------------------------------


async def test_stop_leaves_no_process_directory_mount_or_cgroup(
    tmp_path: Path, image: Image
) -> None:
    limits = Limits(cpus=1, memory_mb=256)
    environment = make_container(
        tmp_path, image, task_env=TaskEnvironmentConfig(cpus=1, memory_mb=256)
    )
    await environment.start(force_build=False)
    root = environment.sandbox_dir
    assert root is not None
    groups = cgroups_of(environment, limits)
    namespace = await pid_namespace_of(environment)
    started = await environment.exec(
        "setsid -f sleep 1000.61; (nohup sleep 1000.62 >/dev/null 2>&1 &); "
        "tmux new-session -d 'sleep 1000.63'"
    )
    assert started.return_code == 0, started.stderr
    await eventually(lambda: len(running("sleep 1000.6")) >= 4)  # three, and tmux's server
    assert groups and all((group / "cgroup.procs").read_text().split() for group in groups)
    assert mounted_below(root) == []  # the overlay is in the sandbox's mount namespace only

    await environment.stop(delete=True)
    assert running("sleep 1000.6") == []
    assert pids_in_pid_namespace(namespace) == []
    assert not root.exists()
    assert mounted_below(root) == []
    assert [group for group in groups if group.exists()] == []
    await environment.stop(delete=True)  # idempotent


async def test_a_killed_host_leaves_nothing_once_reaped(tmp_path: Path, image: Image) -> None:
    """A host SIGKILLed while its sandbox runs (with limits, daemons, tmux): its bwraps die
    with it, and the reaper (as a host's guard runs it) removes the rest: processes,
    directory, cgroups. The overlay was never on the host's mount table."""
    sandboxes = tmp_path / "sandboxes"
    host = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from harbor.models.task.config import EnvironmentConfig
        from harbor.models.trial.paths import TrialPaths
        from harbor_ray.trials.sandbox.container import ContainerEnvironment

        async def main():
            environment = ContainerEnvironment(
                environment_dir=Path({str(image.environment)!r}), environment_name="task",
                session_id="task__env", trial_paths=TrialPaths(Path({str(tmp_path)!r})),
                task_env_config=EnvironmentConfig(cpus=1, memory_mb=256),
                sandboxes_dir={str(sandboxes)!r}, images_dir={str(image.images_dir)!r})
            await environment.start(force_build=False)
            await environment.exec("setsid -f sleep 1000.71; tmux new-session -d 'sleep 1000.72'")
            print(environment.sandbox_dir, flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
    """)
    process = subprocess.Popen(
        [sys.executable, "-c", host],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        try:
            assert process.stdout is not None
            root = Path(process.stdout.readline().strip())
            assert root.parent == sandboxes, "the host did not start its sandbox"
            groups = Cgroups(root, Limits(cpus=1, memory_mb=256)).groups
            assert len(sandboxed("sleep 1000.7")) == 3  # two, and tmux's server
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        await eventually(lambda: sandboxed("sleep 1000.7") == [])  # they died with its bwrap
        assert root.exists() and all(group.exists() for group in groups)  # for the reaper
    finally:
        reap(sandboxes)  # what the host's guard does; here even when the test failed
    assert list(sandboxes.iterdir()) == []
    assert [group for group in groups if group.exists()] == []
    assert mounted_below(sandboxes) == []


# --- Files -----------------------------------------------------------------------------


async def test_transfers_follow_no_symlink_the_agent_planted(
    container: ContainerEnvironment, image: Image, tmp_path: Path
) -> None:
    rootfs = image.root.rootfs
    before = snapshot(rootfs)
    planted = await container.exec(
        f"mkdir -p /app/out && echo mine > /app/out/file && ln -s / /app/out/root && "
        f"ln -s {rootfs} /app/out/image && ln -s ../../../etc/passwd /app/out/up && "
        f"ln -s {rootfs}/usr/bin /app/escape"
    )
    assert planted.return_code == 0, planted.stderr

    target = tmp_path / "download" / "out"
    await container.download_dir("/app/out", target)
    assert sorted(path.name for path in target.iterdir()) == ["file"]
    assert (target / "file").read_text() == "mine\n"
    assert sorted(path.name for path in target.parent.iterdir()) == ["out"]

    payload = tmp_path / "payload"
    payload.write_text("planted\n")
    # The image's path on the host is nothing inside: both fail there.
    with pytest.raises(SandboxError):
        await container.upload_file(payload, "/app/escape/planted")
    with pytest.raises(SandboxError):
        await container.upload_dir(tmp_path / "download", "/app/escape")
    assert snapshot(rootfs) == before


# --- Limits ----------------------------------------------------------------------------


async def test_the_tasks_memory_and_cpu_limits_hold(tmp_path: Path, image: Image) -> None:
    limits = Limits(cpus=0.5, memory_mb=64)
    environment = make_container(
        tmp_path, image, task_env=TaskEnvironmentConfig(cpus=0.5, memory_mb=64)
    )
    await environment.start(force_build=False)
    try:
        assert environment.sandbox_dir is not None
        name = cgroup_name(environment.sandbox_dir)
        for setting in settings(limits, v2=is_v2()):
            path = CGROUP_ROOT / setting.hierarchy / "harbor_ray" / name / setting.file
            if path.exists() or not setting.optional:
                assert path.read_text().strip() == setting.value
        small = await environment.exec("python3 -c 'print(len(bytearray(16 << 20)))'")
        assert small.stdout == f"{16 << 20}\n", small.stderr
        hog = await environment.exec("python3 -c 'bytearray(200 << 20)'")
        assert hog.return_code == 137  # SIGKILL, from the OOM killer
        busy = await environment.exec("timeout 0.5 sh -c 'while :; do :; done'")
        assert busy.return_code == 124
        cpu = CGROUP_ROOT / ("" if is_v2() else "cpu") / "harbor_ray" / name
        stat = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
        assert int(stat["nr_throttled"]) > 0  # held to half a cpu
        assert (await environment.exec("echo alive")).stdout == "alive\n"
    finally:
        await environment.stop(delete=True)


# --- Installed programs, the warm pool, a whole trial ----------------------------------


async def test_a_tool_directory_is_bound_read_only_and_first_on_path(
    tmp_path: Path, image: Image
) -> None:
    entry = tmp_path / "cache" / "toy-1.0"
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "toy").write_text("#!/bin/sh\necho toy over $(jq .answer /app/data.json)\n")
    (entry / "bin" / "toy").chmod(0o755)
    environment = make_container(tmp_path, image, tools={"/opt/tools/toy-1.0": str(entry)})
    await environment.start(force_build=False)
    try:
        result = await environment.exec("command -v toy && toy")
        assert result.stdout == "/opt/tools/toy-1.0/bin/toy\ntoy over 42\n", result.stderr
        assert (await environment.exec("touch /opt/tools/toy-1.0/bin/x")).return_code != 0
        assert sorted(p.name for p in (entry / "bin").iterdir()) == ["toy"]
    finally:
        await environment.stop(delete=True)


async def test_a_warm_pool_hands_out_sandboxes_of_the_image_only(
    tmp_path: Path, image: Image
) -> None:
    sandboxes, ledger = tmp_path / "sandboxes", Ledger(tmp_path / "ledger")
    backend = BwrapBackend(sandboxes)
    pool = WarmPool(backend, {"jq": 1}, ledger)
    register_pool("host-c", pool, backend)
    said: list[str] = []
    logger = logging.getLogger("test_container_sandbox")
    logger.setLevel(logging.INFO)
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    pooled = {"warm_pool": "host-c", "warm_pool_environment": "jq", "logger": logger}
    environments = [make_container(tmp_path, image, f"t{n}", **pooled) for n in range(2)]
    local = make_environment(tmp_path, "local", **pooled)
    try:
        await environments[0].start(force_build=False)  # shows the pool its recipe
        await eventually(lambda: pool.ready("jq") == 1)
        await environments[1].start(force_build=False)
        assert [environment.pooled for environment in environments] == [True, True]
        assert sum("from the warm pool ready" in line for line in said) == 1
        result = await environments[1].exec("jq .answer /app/data.json")
        assert result.stdout == "42\n"
        # A trial of another recipe (the host's userland) starts its own.
        await local.start(force_build=False)
        assert not local.pooled
        assert (await local.exec("test -e /app/data.json")).return_code == 1
    finally:
        logger.removeHandler(handler)
        await asyncio.gather(*(e.stop(delete=True) for e in [*environments, local]))
        unregister_pool("host-c")
        await pool.close()
    assert ledger.listed() == []
    assert list(sandboxes.iterdir()) == []


async def test_an_oracle_trial_in_the_image_gets_its_reward(tmp_path: Path, image: Image) -> None:
    task = tmp_path / "jq-task"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text('version = "1.0"\n\n[environment]\nmemory_mb = 512\n')
    (task / "instruction.md").write_text("Write the answer in /app/data.json to answer.txt.\n")
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\njq .answer /app/data.json > /app/answer.txt\n"
    )
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/answer.txt)" = 42 ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    config = TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=tmp_path / "trials",
        agent=AgentConfig(name="oracle"),
        environment=TrialEnvironmentConfig(
            import_path=IMPORT_PATH,
            kwargs={
                "sandboxes_dir": str(tmp_path / "sandboxes"),
                "images_dir": str(image.images_dir),
            },
        ),
    )
    trial = await Trial.create(config)
    result = await trial.run()
    assert result.exception_info is None
    assert result.verifier_result is not None
    assert result.verifier_result.rewards == {"reward": 1.0}
    record = json.loads((trial.paths.trial_dir / "environment.json").read_text())
    assert (record["kind"], record["digest"]) == ("image", image.root.digest)
    assert list((tmp_path / "sandboxes").iterdir()) == []


# --- Refusals and preflight -------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "refusal"),
    [
        ({}, "declares no image"),
        ({"docker-compose.yaml": "services: {}\n"}, "docker-compose.yaml"),
        # Built (on the base image's layers: seconds), then refused before any sandbox.
        ({"Dockerfile": "FROM debian:bookworm-slim\nUSER nobody\n"}, "sets USER nobody"),
    ],
)
async def test_a_task_it_cannot_give_its_image_is_refused(
    tmp_path: Path, image: Image, files: dict[str, str], refusal: str
) -> None:
    environment_dir = tmp_path / "environment"
    environment_dir.mkdir()
    for name, text in files.items():
        (environment_dir / name).write_text(text)
    environment = make_container(tmp_path, Image(environment_dir, image.images_dir, image.root))
    with pytest.raises(EnvironmentUnsupportedError, match=refusal):
        await environment.start(force_build=False)
    assert environment.sandbox_dir is None
    assert not (tmp_path / "sandboxes").exists()


def test_preflight_passes_on_this_machine() -> None:
    EnvironmentFactory.run_preflight(type=None, import_path=IMPORT_PATH)
    capabilities = ContainerEnvironment.resource_capabilities()
    assert (capabilities.cpu_limit, capabilities.memory_limit) == (True, True)


def test_preflight_names_the_overlays_missing_tools(tmp_path: Path) -> None:
    problems = overlay_problems(search_path=str(tmp_path))
    assert len(problems) == 2
    assert "`unshare`" in problems[0] and "`mount`" in problems[1]
