"""`harbor_ray.jobs.sweep`: what a sweep request refuses before anything starts, and the
manifest it writes. (The sweep itself runs in tests/cluster.)"""

import contextlib
from pathlib import Path

import pytest

import harbor_ray.cluster.nodes as nodes
import harbor_ray.jobs.sweep as jobs_sweep
from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.cluster.host_sizing import NodeCapacity
from harbor_ray.cluster.setup import RunningCluster
from harbor_ray.errors import (
    DatasetError,
    StartError,
    UnknownAgentError,
    WarmPoolUnsupportedError,
)
from harbor_ray.jobs.sweep import SweepRequest, started_sweep


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"agent": "terminus-2"}, "pass --llm-url"),
        ({"llm_url": "http://127.0.0.1:1", "engine": Path("e.yaml")}, "not both"),
        ({"ingress": "carrier-pigeon"}, "--ingress must be one of"),
        ({"proxy_url": "http://10.0.0.1:8770"}, "needs --ingress direct"),
        ({"ingress": "direct", "proxy_url": "ftp://x"}, "--proxy-url must be"),
        ({"concurrency": 0}, r"concurrency \(--concurrency\) must be at least 1"),
        ({"max_concurrency": 16}, "needs the engines' metrics"),
        (
            {"max_concurrency": 16, "min_concurrency": 9, "engine_metrics": ("http://e/m",)},
            "--min-concurrency",
        ),
        (
            {
                "upstream": "anthropic",
                "capture": "text",
                "upstream_key_file": Path("/nonexistent/upstream.key"),
            },
            "--upstream-key-file",
        ),
    ],
)
def test_a_request_that_cannot_work_is_refused_before_anything_starts(
    tmp_path: Path, changes: dict, says: str
) -> None:
    # The fleet's settings refuse the request itself, the others started_sweep.
    with (
        pytest.raises(StartError, match=says),
        started_sweep(SweepRequest(**{"agent": "oracle", "out": tmp_path, **changes})),
    ):
        pass
    assert not (tmp_path / "rollouts").exists()


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"agent": "no-such-agent"}, UnknownAgentError),
        ({"tasks": ["no-such-task"]}, DatasetError),
    ],
)
def test_unknown_names_are_the_trial_layer_s_errors(
    tmp_path: Path, changes: dict, error: type[Exception]
) -> None:
    with (
        pytest.raises(error),
        started_sweep(SweepRequest(**{"agent": "oracle", "out": tmp_path, **changes})),
    ):
        pass


def test_the_manifest_says_what_made_the_dataset() -> None:
    request = SweepRequest(
        agent="oracle",
        sandbox_kwargs={"k": 1},
        attempts=3,
        name="r1",
        ingress="direct",
        proxy_replicas=4,
    )
    without_engine = request.manifest(["a", "b"], None)
    assert without_engine["run"] == "r1" and without_engine["tasks"] == ["a", "b"]
    assert without_engine["attempts"] == 3 and without_engine["sandbox_kwargs"] == {"k": 1}
    assert (
        without_engine["engine"],
        without_engine["ingress"],
        without_engine["proxy_replicas"],
    ) == (None, None, None)
    cert = Certification(
        url="http://e/v1",
        served_model="m",
        models=["m"],
        engine_version=None,
        returns_token_ids=True,
        returns_logprobs=True,
        tool_calling=True,
        tool_calling_fix=None,
        logprobs_mode="processed",
    )
    with_engine = request.manifest(["a"], cert)
    assert with_engine["engine"]["served_model"] == "m"
    assert (with_engine["ingress"], with_engine["proxy_replicas"]) == ("direct", 4)
    host = SweepRequest(agent="oracle").manifest(["a"], cert)
    assert (host["ingress"], host["proxy_replicas"]) == ("host", None)
    assert (host["capture"], host["upstream"], host["upstream_key_file"]) == (
        "tokens",
        "openai-chat",
        None,
    )


def test_an_evaluation_s_manifest_names_its_key_file_not_the_key(tmp_path: Path) -> None:
    key_file = tmp_path / "upstream.key"
    key_file.write_text("sk-never-in-the-manifest\n")
    request = SweepRequest(
        agent="oracle", capture="text", upstream="anthropic", upstream_key_file=key_file
    )
    manifest = request.manifest(["a"], None)
    assert (manifest["capture"], manifest["upstream"]) == ("text", "anthropic")
    assert manifest["upstream_key_file"] == str(key_file)
    assert "sk-never-in-the-manifest" not in repr(manifest)


def test_more_hosts_than_the_nodes_hold_is_a_warning_and_bigger_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        jobs_sweep,
        "running_cluster",
        lambda *a, **k: contextlib.nullcontext(RunningCluster(proxy=None, certification=None)),
    )
    monkeypatch.setattr(
        nodes, "node_capacities", lambda: [NodeCapacity(cpus=2, memory_bytes=24 * 2**30)]
    )
    said: list[str] = []
    request = SweepRequest(agent="oracle", out=tmp_path, concurrency=1000)
    with started_sweep(request, progress=said.append) as started:
        assert started.config.rollouts_per_host == 250  # 4 hosts: 2 CPUs, 2 a CPU
    (warning,) = [line for line in said if line.startswith("warning:")]
    assert "concurrency 1000 at 8 rollouts per host needs 125 host processes" in warning
    assert "--rollouts-per-host 250 silences this" in warning


def test_a_warm_pool_on_a_backend_without_one_is_refused_before_its_checks(tmp_path: Path) -> None:
    # docker is not usable here: the pool's refusal comes first, naming the fix.
    request = SweepRequest(
        agent="oracle", out=tmp_path, sandbox="docker", warm_pool={"hello-file": 1}
    )
    with (
        pytest.raises(WarmPoolUnsupportedError, match="--sandbox container or local"),
        started_sweep(request),
    ):
        pass


def test_a_warm_pool_naming_no_task_of_the_sweep_is_refused(tmp_path: Path) -> None:
    request = SweepRequest(
        agent="oracle", out=tmp_path, tasks=["hello-file"], warm_pool={"hello_file": 1}
    )
    with (
        pytest.raises(StartError, match="names no task of the sweep: hello_file"),
        started_sweep(request),
    ):
        pass


def test_the_warm_pool_flag_reaches_the_request() -> None:
    from typer.testing import CliRunner

    from harbor_ray.cli import app

    shown = " ".join(
        CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert "--warm-pool" in shown and "TASK=N" in shown
    refused = CliRunner().invoke(
        app,
        [
            "sweep",
            "--agent",
            "oracle",
            "--sandbox",
            "docker",
            "--warm-pool",
            "hello-file=1",
            "--out",
            "/nonexistent",
        ],
    )
    assert refused.exit_code == 2
    assert "--sandbox container or local" in " ".join(refused.output.split())
