"""Real sweeps' datasets for the browser and comparison tests, on the session's Ray:
terminus-2 in the bwrap sandbox through the capture proxy (host ingress) to a scripted
fake engine; and three stand-in "models" (the stub agent, each its own served model
name and pass rates) for the comparison."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.fake_engine import FakeEngine, FakeReply
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.stub_agent import chat_agent
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
    with fake_engine_in_thread(
        FakeEngine(script=numbered(terminus_script("echo hello > /app/hello.txt\n")))
    ) as (_, llm_url):
        engine = HttpEngine(llm_url)
        try:
            served_model = (await certify(engine, engine.root)).served_model
        finally:
            await engine.aclose()
        proxy = start_capture_proxy(llm_url, served_model, ingress="host", replicas=0)
        tasks = select_tasks(resolve_dataset("samples"), TASKS)
        specs = make_specs(
            tasks,
            ATTEMPTS,
            agent="terminus-2",
            sandbox="local",
            trials_dir=out / "trials",
            run_id="report",
            budget=6,
            deadline_s=300,
        )
        try:
            await sweep(
                specs,
                SweepConfig(out=out, concurrency=4, proxy=proxy),
                {"agent": "terminus-2", "run": "report"},
            )
        finally:
            stop_capture_proxy(proxy)
    return out


# Each stand-in model's passing attempts per task (attempt a passes when a < the
# number) and its attempts per task. The hosted one ran fewer attempts and a task the
# others did not, and skipped one they ran: the comparison must say so.
MODELS: dict[str, tuple[dict[str, int], int]] = {
    "base-model": ({"hello-file": 1, "count-words": 0, "fix-mean": 2}, 4),
    "trained-model": ({"hello-file": 3, "count-words": 2, "fix-mean": 2}, 4),
    "hosted-model": ({"hello-file": 2, "count-words": 0, "greet-function": 1}, 2),
}


def planned_reward(passes: dict[str, int]) -> Callable[[str, str], float]:
    """The reward of a rollout id (`task__attempt__run`) as MODELS plans it (the stub
    agent also passes the task's name, which the id already holds)."""

    def reward(rollout_id: str, _task: str) -> float:
        task, attempt, _ = rollout_id.split("__")
        return 1.0 if int(attempt) < passes[task] else 0.0

    return reward


@pytest.fixture(scope="session")
async def compared_sweeps(
    ray_cluster: None, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """One real sweep per stand-in model of MODELS (its dataset by model name)."""
    root = tmp_path_factory.mktemp("compare-sweeps")
    outs = {}
    with fake_engine_in_thread(FakeEngine()) as (_, llm_url):
        for model, (passes, attempts) in MODELS.items():
            out = outs[model] = root / model
            specs = make_specs(
                select_tasks(resolve_dataset("samples"), sorted(passes)),
                attempts,
                agent="terminus-2",
                sandbox="local",
                trials_dir=out / "trials",
                run_id=model,
                deadline_s=300,
            )
            config = SweepConfig(
                out=out, concurrency=4, proxy=ProxyTarget(llm_url, model, ingress="host")
            )
            await sweep(
                specs,
                config,
                {"agent": "terminus-2", "run": model},
                work=chat_agent(1, reward=planned_reward(passes)),
            )
    return outs
