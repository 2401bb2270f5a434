"""Sweeps whose agent calls a model: terminus-2 in the bwrap sandbox, through the capture
proxy deployment (stateless Serve replicas) to a scripted stub engine and to the real
engine, with every session held by the rollout's host."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pyarrow.parquet as pq
import pytest
import ray
from ray import serve

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.proxy.certify import certify, certify_url
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.proxy_deployment import remove_capture_proxy
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.data.readers import read_sequences
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.cluster_actors import replica_actor_names
from tests.fixtures.sglang_engine import SglangStandIn, sglang_app
from tests.fixtures.stub_agent import chat_agent
from tests.fixtures.threaded import fake_engine_in_thread, serve_in_thread
from tests.trials.scripts import terminus_script

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
INFRA = {"infra_lost", "internal", "engine_error", "sandbox_start", "agent_setup"}


async def _proxy_for(llm_url: str, ingress: Ingress = "direct") -> ProxyTarget:
    """Certify once, as the sweep's entry points do, then deploy the replicas (none for
    `host` ingress: the hosts serve the proxy)."""
    served_model = await _certified_model(llm_url)
    return start_capture_proxy(llm_url, served_model, ingress=ingress, replicas=2)


async def _certified_model(llm_url: str) -> str:
    engine = HttpEngine(llm_url)
    try:
        return (await certify(engine, engine.root)).served_model
    finally:
        await engine.aclose()


@pytest.fixture(scope="module")
def echo_engine(ray_cluster: None) -> Iterator[tuple[FakeEngine, str]]:
    with fake_engine_in_thread(FakeEngine()) as served:
        yield served


@pytest.fixture(scope="module")
def scripted_engine(ray_cluster: None) -> Iterator[tuple[FakeEngine, str]]:
    script = terminus_script("echo hello > /app/hello.txt\n")
    with fake_engine_in_thread(FakeEngine(script=script)) as served:
        yield served


def _specs(out: Path, names: list[str], attempts: int, **kwargs):
    tasks = select_tasks(resolve_dataset("samples"), names)
    return make_specs(
        tasks,
        attempts,
        agent="terminus-2",
        sandbox="local",
        trials_dir=out / "trials",
        run_id="cap",
        **kwargs,
    )


@pytest.mark.parametrize("ingress", ["direct", "host"])
async def test_terminus2_sweep_through_the_deployment(
    tmp_path: Path, scripted_engine: tuple[FakeEngine, str], ingress: Ingress
) -> None:
    engine, llm_url = scripted_engine
    proxy = await _proxy_for(llm_url, ingress)
    engine.calls.clear()  # certification's probes
    out = tmp_path / "out"
    try:
        stats = await sweep(
            _specs(out, ["hello-file"], 2, budget=6, deadline_s=300),
            SweepConfig(out=out, concurrency=2, proxy=proxy),
            {},
        )
    finally:
        stop_capture_proxy(proxy)
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert [(r["ok"], r["reward"]) for r in rows] == [(True, 1.0), (True, 1.0)], rows
    assert stats.peak_in_flight == 2
    # Every call the engine answered is one recorded turn, none lost or doubled.
    assert sum(r["counts"]["model_calls"] for r in rows) == len(engine.calls) >= 4
    turns = pq.read_table(out / "turns").to_pylist()
    assert len(turns) == len(engine.calls)
    sequences = read_sequences(out).take_all()
    assert {s["rollout_id"] for s in sequences} == {r["rollout_id"] for r in rows}
    assert all(sum(s["loss_mask"]) > 0 for s in sequences)


@pytest.mark.parametrize("ingress", ["direct", "host"])
async def test_real_engine_sweep_through_the_deployment(
    tmp_path: Path, engine_url: str, ingress: Ingress
) -> None:
    """SmolLM2 rarely solves a task; what must hold is the capture: every row has
    the model's own turns, and nothing failed in the infrastructure."""
    proxy = await _proxy_for(engine_url, ingress)
    out = tmp_path / "out"
    try:
        await sweep(
            _specs(
                out,
                ["hello-file"],
                2,
                budget=2,
                deadline_s=600,
                sampling=Sampling(max_tokens=48, temperature=0.7),
            ),
            SweepConfig(out=out, concurrency=2, proxy=proxy),
            {},
        )
    finally:
        stop_capture_proxy(proxy)
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert len(rows) == 2
    for row in rows:
        assert row["error_type"] not in INFRA, row
        assert row["counts"]["model_calls"] >= 1, row
    turns = pq.read_table(out / "turns").to_pylist()
    assert len(turns) == sum(r["counts"]["model_calls"] for r in rows)
    assert all(len(t["token_ids"]) >= 1 for t in turns)


@pytest.mark.parametrize("ingress", ["direct", "serve"])
async def test_replica_killed_mid_sweep_loses_nothing(
    tmp_path: Path, echo_engine: tuple[FakeEngine, str], ingress: Literal["direct", "serve"]
) -> None:
    """Agents retry what a dying replica dropped (through their host's relay, or Serve's
    route); the owners hold every answered turn."""
    engine, llm_url = echo_engine
    proxy = await _proxy_for(llm_url, ingress)
    out = tmp_path / "out"
    calls, count = 6, 16
    specs = _specs(out, ["hello-file"], count)
    config = SweepConfig(out=out, concurrency=8, proxy=proxy, retries=0)
    engine.calls.clear()
    try:
        running = asyncio.create_task(
            sweep(specs, config, {}, work=chat_agent(calls, think_s=0.3, call_timeout_s=20))
        )
        async with asyncio.timeout(240):  # a sweep that stalls fails here, not hangs
            while len(engine.calls) < 20:
                assert not running.done()
                await asyncio.sleep(0.05)
        victim = replica_actor_names()[0]
        ray.kill(ray.get_actor(victim, namespace="serve"))
        stats = await running
    finally:
        remove_capture_proxy()
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert stats.ok == len(rows) == count, [r["error"] for r in rows if not r["ok"]]
    # Each answer the agents saw is a recorded turn (the stub agent checks its own), and
    # every recorded turn reached the dataset.
    recorded = sum(r["counts"]["model_calls"] for r in rows)
    assert recorded >= calls * count
    assert len(pq.read_table(out / "turns")) == recorded


@pytest.mark.parametrize(
    ("ingress", "replicas"), [("direct", 2), (None, None)], ids=["direct", "default"]
)
def test_sweep_command_certifies_once_and_stores_it(
    tmp_path: Path,
    scripted_engine: tuple[FakeEngine, str],
    ingress: Ingress | None,
    replicas: int | None,
) -> None:
    """The entry point users run: certify, deploy the proxy (unless the hosts serve it,
    the default), sweep, remove the proxy, and keep the certification in the manifest."""
    engine, llm_url = scripted_engine
    out = tmp_path / "out"
    argv = [
        sys.executable,
        str(ROOT / "jobs" / "sweep.py"),
        "--agent",
        "terminus-2",
        "--llm-url",
        llm_url,
        "--task",
        "hello-file",
        "-n",
        "2",
        "--budget",
        "6",
        "--out",
        str(out),
        "--name",
        "cli",
        "--ray-address",
        ray.get_runtime_context().gcs_address,
    ]
    argv += ["--ingress", ingress] if ingress else []
    engine.calls.clear()
    asyncio.run(_certified_model(llm_url))
    one_certification = len(engine.calls)
    engine.calls.clear()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "hello-file" in done.stderr and str(out) in done.stderr  # the summary
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["engine"]["served_model"] and manifest["engine"]["returns_token_ids"]
    assert manifest["ingress"] == (ingress or "host")
    assert manifest["proxy_replicas"] == replicas
    assert manifest["ended_at"] is not None
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert [r["ok"] for r in rows] == [True, True]
    # One certification (its probes) plus the agents' calls, which are all recorded.
    probes = len(engine.calls) - sum(r["counts"]["model_calls"] for r in rows)
    assert one_certification >= 1 and probes == one_certification
    assert "capture" not in serve.status().applications


@pytest.mark.parametrize("ingress", ["direct", "host"])
async def test_a_sweep_against_sglang_keeps_its_exact_ids(
    tmp_path: Path, ray_cluster: None, ingress: Ingress
) -> None:
    """Certified from the driver as SGLang (found from its answers); the replicas, or
    the hosts, reach it through the same adapter, so each turn holds SGLang's ids."""
    stand_in = SglangStandIn(
        script=terminus_script("echo hello > /app/hello.txt\n"), return_token_ids=False
    )
    out = tmp_path / "out"
    with serve_in_thread(sglang_app(stand_in)) as llm_url:
        cert = await certify_url(llm_url)
        assert cert.engine_kind == "sglang"
        proxy = start_capture_proxy(
            llm_url, cert.served_model, ingress=ingress, replicas=1, engine_kind=cert.engine_kind
        )
        try:
            await sweep(
                _specs(out, ["hello-file"], 1, budget=6, deadline_s=300),
                SweepConfig(out=out, concurrency=1, proxy=proxy),
                {},
            )
        finally:
            stop_capture_proxy(proxy)
    (row,) = pq.read_table(out / "rollouts").to_pylist()
    assert (row["ok"], row["reward"]) == (True, 1.0), row
    turns = sorted(pq.read_table(out / "turns").to_pylist(), key=lambda t: t["index"])
    assert turns and len(turns) == row["counts"]["model_calls"]
    # The ids the stand-in's own tokenizer sampled for the agent's calls (the last ones).
    assert [t["token_ids"] for t in turns] == stand_in.outputs[-len(turns) :]
