"""The bubblewrap sandbox, with real bwrap and real processes.

Process checks read the host's /proc directly (cmdlines, pid namespaces), so they do not
depend on the sandbox's own bookkeeping being right.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig
from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig
from harbor.models.trial.paths import TrialPaths
from harbor.trial.trial import Trial

from harbor_ray.errors import ExecTimeoutError, SandboxError, SandboxUnavailableError
from harbor_ray.trials.sandbox import BwrapEnvironment, find_problems, shares_host_network
from harbor_ray.trials.sandbox.processes import pids_in_pid_namespace
from tests.waiting import eventually

IMPORT_PATH = "harbor_ray.trials.sandbox.bwrap:BwrapEnvironment"


def make_environment(
    tmp_path: Path,
    name: str = "task",
    *,
    task_env: TaskEnvironmentConfig | None = None,
    **kwargs: Any,
) -> BwrapEnvironment:
    return BwrapEnvironment(
        environment_dir=tmp_path / name / "environment",
        environment_name=name,
        session_id=f"{name}__env",
        trial_paths=TrialPaths(tmp_path / name / "trial"),
        task_env_config=task_env or TaskEnvironmentConfig(),
        sandboxes_dir=tmp_path / "sandboxes",
        **kwargs,
    )


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[BwrapEnvironment]:
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    yield environment
    await environment.stop(delete=True)


def live_cmdlines() -> dict[int, str]:
    """Every live (not zombie) host process and its command line."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X"):
            continue
        found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def running(marker: str) -> list[str]:
    return [cmdline for cmdline in live_cmdlines().values() if marker in cmdline]


async def pid_namespace_of(environment: BwrapEnvironment) -> int:
    """The sandbox's pid namespace, as seen from inside (`pid:[inode]`)."""
    result = await environment.exec("readlink /proc/self/ns/pid")
    assert result.stdout is not None
    return int(result.stdout.strip().removeprefix("pid:[").removesuffix("]"))


# --- A real Harbor trial ---------------------------------------------------------------


def write_task(directory: Path, answer: str) -> Path:
    (directory / "tests").mkdir(parents=True)
    (directory / "solution").mkdir()
    (directory / "task.toml").write_text(
        'version = "1.0"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n'
    )
    (directory / "instruction.md").write_text("Write 6 * 7 into /app/answer.txt.\n")
    (directory / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\necho {answer} > /app/answer.txt\n"
    )
    (directory / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        'if [ "$(cat /app/answer.txt)" = "42" ]; then reward=1; else reward=0; fi\n'
        "echo $reward > /logs/verifier/reward.txt\n"
    )
    return directory


@pytest.mark.integration
@pytest.mark.parametrize(
    ("answer", "auto_mounting", "reward"),
    [
        ("$((6 * 7))", False, 1.0),
        ("$((6 * 7))", True, 1.0),
        ("41", False, 0.0),
    ],
    ids=["downloaded-logs", "mounted-logs", "wrong-answer"],
)
async def test_oracle_trial_gets_its_reward(
    tmp_path: Path, answer: str, auto_mounting: bool, reward: float
) -> None:
    task = write_task(tmp_path / "answer-task", answer)
    sandboxes = tmp_path / "sandboxes"
    config = TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=tmp_path / "trials",
        agent=AgentConfig(name="oracle"),
        environment=TrialEnvironmentConfig(
            import_path=IMPORT_PATH,
            kwargs={"auto_mounting": auto_mounting, "sandboxes_dir": str(sandboxes)},
        ),
    )
    trial = await Trial.create(config)
    result = await trial.run()

    assert result.exception_info is None
    assert result.verifier_result is not None
    assert result.verifier_result.rewards == {"reward": reward}
    assert (trial.paths.verifier_dir / "reward.txt").read_text().strip() == str(int(reward))
    # With auto_mounting the trial's log dirs are bound in (Harbor reads them in
    # place); without, Harbor copies them out through download_dir.
    environment = trial.agent_environment
    assert (
        environment.is_path_mounted(PurePosixPath("/logs/verifier"), trial.paths.verifier_dir)
        is auto_mounting
    )
    assert environment.sandbox_dir is None
    assert list(sandboxes.iterdir()) == []


# --- Isolation -------------------------------------------------------------------------


async def test_host_system_dirs_are_read_only(sandbox: BwrapEnvironment) -> None:
    probe = Path("/usr/harbor-ray-bwrap-probe")
    assert not probe.exists()
    try:
        result = await sandbox.exec(
            f"touch {probe}; echo touch=$?; "
            # With capabilities left, a bind mount could simply be remounted writable.
            "mount -o remount,rw,bind /usr 2>/dev/null; echo remount=$?; "
            f"touch {probe} 2>/dev/null; echo again=$?; "
            "echo x >> /etc/hostname; echo etc=$?; "
            "cat /etc/shadow; echo shadow=$?"  # host secrets are masked
        )
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)  # a broken sandbox must not break the next run
    assert result.stdout is not None
    assert result.stdout.split() == ["touch=1", "remount=32", "again=1", "etc=1", "shadow=1"]
    assert "Read-only file system" in (result.stderr or "")


async def test_sandbox_survives_an_agent_killing_everything(sandbox: BwrapEnvironment) -> None:
    await sandbox.exec("kill -9 -1; pkill sleep; kill -TERM 1")
    result = await sandbox.exec("echo alive")
    assert result.stdout == "alive\n"


async def test_two_sandboxes_see_only_their_own_files_and_processes(tmp_path: Path) -> None:
    first = make_environment(tmp_path, "first")
    second = make_environment(tmp_path, "second")
    await asyncio.gather(first.start(force_build=False), second.start(force_build=False))
    try:
        await first.exec("echo first > /app/owner; sleep 1000.41 &")
        await second.exec("echo second > /app/owner")
        for environment, owner in ((first, "first"), (second, "second")):
            result = await environment.exec("ls /app; cat /app/owner")
            assert result.stdout == f"owner\n{owner}\n"
        assert "sleep 1000.41" not in ((await second.exec("ps -eo args")).stdout or "")
        assert "sleep 1000.41" in ((await first.exec("ps -eo args")).stdout or "")
        assert first.sandbox_dir != second.sandbox_dir
    finally:
        await asyncio.gather(first.stop(delete=True), second.stop(delete=True))


# --- Network ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "task_env", "reachable"),
    [
        ({}, TaskEnvironmentConfig(), False),
        ({"share_network": True}, TaskEnvironmentConfig(), True),
        ({}, TaskEnvironmentConfig(network_mode=NetworkMode.PUBLIC), True),
        (
            {
                "share_network": True,
                "network_policy": NetworkPolicy(network_mode=NetworkMode.NO_NETWORK),
            },
            TaskEnvironmentConfig(network_mode=NetworkMode.NO_NETWORK),
            False,
        ),
    ],
    ids=["default", "share_network", "task-public", "task-no-network"],
)
async def test_host_loopback_is_reachable_only_when_allowed(
    tmp_path: Path, kwargs: dict[str, Any], task_env: TaskEnvironmentConfig, reachable: bool
) -> None:
    accepted: list[bool] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    environment = make_environment(tmp_path, task_env=task_env, **kwargs)
    await environment.start(force_build=False)
    try:
        result = await environment.exec(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout_sec=10
        )
    finally:
        await environment.stop(delete=True)
        server.close()
        await server.wait_closed()
    assert (result.stdout == "connected\n") is reachable
    assert bool(accepted) is reachable


def test_network_decision() -> None:
    public, closed = NetworkPolicy(), NetworkPolicy(network_mode=NetworkMode.NO_NETWORK)
    unset = TaskEnvironmentConfig()
    assert not shares_host_network(public, unset, requested=False)
    assert shares_host_network(public, unset, requested=True)
    explicit = TaskEnvironmentConfig(network_mode=NetworkMode.PUBLIC)
    assert shares_host_network(public, explicit, requested=False)
    assert not shares_host_network(closed, unset, requested=True)


# --- Processes -------------------------------------------------------------------------


async def test_exec_timeout_kills_the_process_tree(sandbox: BwrapEnvironment) -> None:
    started = time.monotonic()
    with pytest.raises(ExecTimeoutError, match="timed out after 1 seconds") as raised:
        await sandbox.exec(
            # A background job, a child in its own session, an orphaned grandchild.
            "sleep 1000.11 & setsid sleep 1000.12 & (sleep 1000.13 &); sleep 1000.14",
            timeout_sec=1,
        )
    assert isinstance(raised.value, RuntimeError)
    assert time.monotonic() - started < 10
    # Killed, not necessarily gone yet: under load (CI's three test runs) a SIGKILLed
    # `sleep` was still listed the moment the exec returned.
    await eventually(lambda: running("sleep 1000.1") == [])
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_a_command_killed_by_a_signal_exits_128_plus_the_signal(
    sandbox: BwrapEnvironment,
) -> None:
    # As a shell and `docker exec` report it: kimi-cli's adapter ends its own process
    # group (`kill 0`) and takes exit 143 for success.
    assert (await sandbox.exec("kill -TERM $$")).return_code == 143
    assert (await sandbox.exec("exit 3")).return_code == 3


async def test_exec_returns_while_background_jobs_keep_running(
    sandbox: BwrapEnvironment,
) -> None:
    started = time.monotonic()
    result = await sandbox.exec("sleep 1000.21 & echo started")
    assert result.stdout == "started\n"
    assert time.monotonic() - started < 10
    assert len(running("sleep 1000.21")) == 1


async def test_cancelled_exec_leaves_no_process_and_stop_removes_the_directory(
    tmp_path: Path,
) -> None:
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    root = environment.sandbox_dir
    assert root is not None and (root / "app").is_dir()

    command = asyncio.create_task(environment.exec("sleep 100.31"))
    # bash, its nsenter and the sleep itself all carry the marker.
    await eventually(lambda: any(c.startswith("sleep 100.31") for c in live_cmdlines().values()))
    command.cancel()
    with pytest.raises(asyncio.CancelledError):
        await command
    assert running("sleep 100.31") == []

    await environment.stop(delete=True)
    assert not root.exists()
    assert environment.sandbox_dir is None


async def test_no_process_survives_stop(tmp_path: Path) -> None:
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    namespace = await pid_namespace_of(environment)
    await environment.exec("sleep 1000.51 &")
    result = await environment.exec("tmux new-session -d -s background 'sleep 1000.52'")
    assert result.return_code == 0, result.stderr
    await eventually(lambda: len(running("sleep 1000.5")) >= 3)  # sleep, tmux, its sleep
    assert len(pids_in_pid_namespace(namespace)) >= 4  # and the sandbox's pid 1

    await environment.stop(delete=True)
    assert running("sleep 1000.5") == []
    assert pids_in_pid_namespace(namespace) == []
    await environment.stop(delete=True)  # idempotent
    with pytest.raises(SandboxError):
        await environment.exec("true")


async def test_tmux_server_lives_across_execs(sandbox: BwrapEnvironment) -> None:
    start = await sandbox.exec("tmux new-session -d -s agent -x 120 -y 30 'bash --norc'")
    assert start.return_code == 0, start.stderr
    keys = await sandbox.exec("tmux send-keys -t agent 'echo hi-$((6 * 7))' Enter")
    assert keys.return_code == 0, keys.stderr

    async def captured() -> str:
        return (await sandbox.exec("tmux capture-pane -p -t agent")).stdout or ""

    deadline = time.monotonic() + 10
    while "hi-42" not in await captured():
        assert time.monotonic() < deadline, await captured()
        await asyncio.sleep(0.1)


# --- exec and files --------------------------------------------------------------------


async def test_exec_gets_exactly_the_given_env_and_cwd(
    sandbox: BwrapEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARBOR_RAY_HOST_ONLY", "leaked")
    command = "echo ${HARBOR_RAY_HOST_ONLY:-unset} $GREETING; pwd"
    result = await sandbox.exec(command, env={"GREETING": "hello"})
    assert result.stdout == "unset hello\n/app\n"
    assert (await sandbox.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
    assert "GREETING" not in os.environ
    failed = await sandbox.exec("echo out; echo err >&2; exit 3")
    assert (failed.stdout, failed.stderr, failed.return_code) == ("out\n", "err\n", 3)


async def test_task_workdir_is_the_default_cwd(tmp_path: Path) -> None:
    environment = make_environment(tmp_path, task_env=TaskEnvironmentConfig(workdir="/srv/w"))
    await environment.start(force_build=False)
    try:
        assert (await environment.exec("pwd")).stdout == "/srv/w\n"
    finally:
        await environment.stop(delete=True)


async def test_only_root_is_available(sandbox: BwrapEnvironment) -> None:
    assert (await sandbox.exec("id -u", user="root")).stdout == "0\n"
    with pytest.raises(ValueError, match="agent"):
        await sandbox.exec("id -u", user="agent")


async def test_files_round_trip(sandbox: BwrapEnvironment, tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "nested").mkdir(parents=True)
    (source / "run.sh").write_text("#!/bin/bash\necho ran\n")
    (source / "run.sh").chmod(0o755)
    (source / "nested" / "data.bin").write_bytes(bytes(range(256)))
    single = tmp_path / "single.txt"
    single.write_text("one file\n")

    await sandbox.upload_dir(source, "/tests")
    await sandbox.upload_file(single, "/logs/agent/deep/single.txt")
    assert (await sandbox.exec("/tests/run.sh")).stdout == "ran\n"

    await sandbox.download_dir("/tests", tmp_path / "back")
    assert (tmp_path / "back" / "nested" / "data.bin").read_bytes() == bytes(range(256))
    assert os.access(tmp_path / "back" / "run.sh", os.X_OK)
    await sandbox.download_file("/logs/agent/deep/single.txt", tmp_path / "out" / "s.txt")
    assert (tmp_path / "out" / "s.txt").read_text() == "one file\n"
    with pytest.raises(SandboxError):
        await sandbox.download_file("/does/not/exist", tmp_path / "missing")


async def test_transfers_resolve_planted_symlinks_inside_the_sandbox(
    sandbox: BwrapEnvironment, tmp_path: Path
) -> None:
    victim = tmp_path / "host-victim"
    victim.mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("host secret\n")
    await sandbox.exec(f"ln -s {victim} /app/escape; ln -s {secret} /app/secret")
    payload = tmp_path / "payload"
    payload.write_text("planted\n")

    with pytest.raises(SandboxError):
        await sandbox.upload_file(payload, "/app/escape/planted")
    assert list(victim.iterdir()) == []
    with pytest.raises(SandboxError):
        await sandbox.download_file("/app/secret", tmp_path / "stolen")
    await sandbox.download_dir("/app", tmp_path / "app-copy")
    assert not (tmp_path / "app-copy" / "secret").exists()


# --- Preflight -------------------------------------------------------------------------


def tools_dir(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir(exist_ok=True)
    for name in names:
        found = shutil.which(name)
        assert found is not None, f"{name} is needed on this machine"
        (directory / name).symlink_to(found)
    return directory


def test_preflight_passes_on_this_machine() -> None:
    assert find_problems() == []
    EnvironmentFactory.run_preflight(type=None, import_path=IMPORT_PATH)


def test_preflight_names_everything_missing(tmp_path: Path) -> None:
    problems = find_problems(search_path=str(tools_dir(tmp_path)))
    assert len(problems) == 3
    assert "`bwrap`" in problems[0] and "`bubblewrap`" in problems[0]
    assert "`nsenter`" in problems[1] and "util-linux" in problems[1]
    assert "`tmux`" in problems[2] and "terminus-2" in problems[2]


def test_preflight_reports_a_missing_bwrap_alone(tmp_path: Path) -> None:
    problems = find_problems(search_path=str(tools_dir(tmp_path, "nsenter", "tmux")))
    assert len(problems) == 1
    assert "`bubblewrap`" in problems[0]


def test_preflight_reports_why_bwrap_cannot_create_namespaces(tmp_path: Path) -> None:
    directory = tools_dir(tmp_path, "nsenter", "tmux")
    fake = directory / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    problems = find_problems(search_path=str(directory))
    assert len(problems) == 1
    assert "user namespaces" in problems[0]
    assert "setting up uid map: Permission denied" in problems[0]


async def test_start_refuses_without_bwrap(tmp_path: Path) -> None:
    directory = tools_dir(tmp_path, "nsenter", "tmux")
    environment = make_environment(tmp_path, search_path=str(directory))
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        await environment.start(force_build=False)
    assert environment.sandbox_dir is None


# --- Installed programs (tools) --------------------------------------------------------


async def test_tools_are_mounted_read_only_and_first_on_path(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "toy-1.0"
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "toy").write_text("#!/bin/sh\necho toy from the cache\n")
    (entry / "bin" / "toy").chmod(0o755)
    environment = make_environment(tmp_path, tools={"/opt/tools/toy-1.0": str(entry)})
    await environment.start(force_build=False)
    try:
        result = await environment.exec("command -v toy && toy && command -v node")
        assert result.return_code == 0, result.stderr
        assert result.stdout == "/opt/tools/toy-1.0/bin/toy\ntoy from the cache\n/usr/bin/node\n"
        written = await environment.exec("touch /opt/tools/toy-1.0/bin/planted")
        assert written.return_code != 0
        assert sorted(p.name for p in (entry / "bin").iterdir()) == ["toy"]
    finally:
        await environment.stop(delete=True)


async def test_runtimes_are_mounted_read_only_at_their_path_and_off_path(
    tmp_path: Path,
) -> None:
    # A Python agent's interpreter: its venv names it by this path, and its bin/ must
    # not shadow the host's python3.
    prefix = tmp_path / "cpython"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").write_text("#!/bin/sh\necho cpython\n")
    (prefix / "bin" / "python3").chmod(0o755)
    environment = make_environment(tmp_path, runtimes={"/opt/cpython": str(prefix)})
    await environment.start(force_build=False)
    try:
        result = await environment.exec("/opt/cpython/bin/python3; command -v python3")
        assert result.stdout == "cpython\n/usr/bin/python3\n", result.stderr
        assert (await environment.exec("touch /opt/cpython/x")).return_code != 0
    finally:
        await environment.stop(delete=True)


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("opt/toy", "absolute"),
        ("/", "absolute"),
        ("/usr/local/toy", "inside the host"),
    ],
)
def test_tools_outside_the_host_system_dirs_only(tmp_path: Path, target: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        make_environment(tmp_path, tools={target: str(tmp_path)})
