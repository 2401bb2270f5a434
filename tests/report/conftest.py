"""A real sweep's dataset for the browser tests: terminus-2 in the bwrap sandbox through
the capture proxy (host ingress) to a scripted fake engine, on the session's Ray."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.fake_engine import FakeEngine, FakeReply
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.threaded import fake_engine_in_thread
from tests.trials.scripts import terminus_script

TASKS = ["count-words", "hello-file"]  # the script solves hello-file only
ATTEMPTS = 2


def numbered(script: Callable[[list[dict]], FakeReply]) -> Callable[[list[dict]], FakeReply]:
    """terminus-2's `script` with each reply numbered in its analysis: every rollout's
    sampled ids differ from every other's, so a viewer that shows another row's tokens
    than the one selected cannot pass for a right one."""
    replies = itertools.count()

    def script_numbered(messages: list[dict]) -> FakeReply:
        reply = json.loads(script(messages).text)
        reply["analysis"] += f" (reply {next(replies)})"
        return FakeReply(text=json.dumps(reply))

    return script_numbered


@pytest.fixture(scope="session")
async def sweep_dataset(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report-sweep") / "out"
    with fake_engine_in_thread(FakeEngine(script=numbered(terminus_script(
            "echo hello > /app/hello.txt\n")))) as (_, llm_url):
        engine = HttpEngine(llm_url)
        try:
            served_model = (await certify(engine, engine.root)).served_model
        finally:
            await engine.aclose()
        proxy = start_capture_proxy(llm_url, served_model, ingress="host", replicas=0)
        tasks = select_tasks(resolve_dataset("samples"), TASKS)
        specs = make_specs(tasks, ATTEMPTS, agent="terminus-2", sandbox="local",
                           trials_dir=out / "trials", run_id="report", budget=6,
                           deadline_s=300)
        try:
            await sweep(specs, SweepConfig(out=out, concurrency=4, proxy=proxy),
                        {"agent": "terminus-2", "run": "report"})
        finally:
            stop_capture_proxy(proxy)
    return out
