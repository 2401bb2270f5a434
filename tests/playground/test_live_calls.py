"""The run view through the real path: a run started over the playground's HTTP API (or
its page, in headless Chromium) goes through `run_rollouts` itself (terminus-2 in the
local sandbox, the real capture proxy, a scripted fake engine served over loopback);
each model call reaches the page while the run runs, with the ids the engine sampled,
and the page shows each stage the run reached, in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By

from harbor_ray.capture.proxy.fake_engine import encode
from harbor_ray.jobs.rollouts import run_rollouts
from harbor_ray.playground.catalog import Catalog
from harbor_ray.qualify.script import scripted_engine
from tests.fixtures.threaded import fake_engine_in_thread
from tests.playground.served import client_of, served
from tests.report.browser import chromium, js_errors, wait_for

pytestmark = pytest.mark.integration

TASK = "hello-file"


def test_a_real_runs_calls_reach_the_page_while_it_runs(catalog: Catalog, tmp_path: Path) -> None:
    engine = scripted_engine("terminus-2", catalog.task("samples", TASK).path)
    engine.delay_s = 1.0  # each call: time for the page to see the run still running
    with (
        fake_engine_in_thread(engine) as (_, llm_url),
        client_of(catalog, tmp_path, run=run_rollouts, engine=llm_url) as client,
    ):
        run = client.post(
            "/api/runs",
            json={
                "agent": "terminus-2",
                "dataset": "samples",
                "task": TASK,
                "attempts": 1,
                "engine": "server",
                "budget": 6,
            },
        ).json()
        seen, while_running = [], []
        deadline = time.monotonic() + 240
        while True:
            page = client.get("/api/calls", params={"id": run["id"], "after": len(seen)}).json()
            seen += page["calls"]
            if page["run"]["status"] == "running" and seen:
                while_running.append(len(seen))
            if page["run"]["status"] in ("done", "failed") and not page["more"]:
                break
            assert time.monotonic() < deadline, page["run"]
            threading.Event().wait(0.1)
    assert page["run"]["status"] == "done", page["run"]
    assert [r["reward"] for r in page["run"]["rollouts"]] == [1.0]
    assert while_running, "no call was shown before the run ended"
    # Every generation the engine made for the rollout (not the certification's, which
    # belong to no session) is on the page, in order, with the ids it sampled (the fake
    # engine's ids are its reply's bytes, then its end token).
    assert len(seen) == sum(s is not None for s in engine.sessions) >= 2
    assert [c["index"] for c in seen] == list(range(len(seen)))
    for call in seen:
        assert call["token_ids"][:-1] == encode(call["reply"]["content"])
        assert len(call["logprobs"]) == len(call["token_ids"])


# What the page names each stage of a run of one rollout, in the order it reaches them.
STAGES = [
    "queued",
    "preparing",
    "sandbox starting",
    "agent setup",
    "agent running",
    "verifying",
    "rollout ended",
    "done",
]


def test_a_real_run_shows_its_stages_in_order(catalog: Catalog, tmp_path: Path) -> None:
    engine = scripted_engine("terminus-2", catalog.task("samples", TASK).path)
    with (
        fake_engine_in_thread(engine) as (_, llm_url),
        served(catalog, tmp_path, run=run_rollouts, engine=llm_url) as url,
        chromium(1280, 800) as driver,
    ):
        driver.get(f"{url}/task/samples/{TASK}")
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, "form.run select option"),
            what="the agents",
        )
        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        wait_for(lambda: "/run/" in driver.current_url, what="the run's URL")
        wait_for(
            lambda: driver.execute_script(
                "const s = document.querySelector('#run-detail .stages span.current');"
                "return s && /^(done|failed)/.test(s.textContent)"
            ),
            timeout_s=240,
            what="the run's end",
        )
        shown = driver.execute_script(
            "return [...document.querySelectorAll('#run-detail .stages span')]"
            ".map(s => s.textContent)"
        )
        (run,) = httpx.get(
            f"{url}/api/runs", cookies={c["name"]: c["value"] for c in driver.get_cookies()}
        ).json()["runs"]
        assert js_errors(driver) == []
    assert run["status"] == "done", run
    # Each stage heard as it was reached (Harbor's hooks, the agent's setup), each once,
    # in order, and each shown with the seconds the run spent there but the last.
    assert [m["stage"] for m in run["stages"]] == [
        "queued",
        "preparing",
        "sandbox",
        "agent_setup",
        "agent",
        "verifying",
        "ended",
        "done",
    ]
    assert [m["at"] for m in run["stages"]] == sorted(m["at"] for m in run["stages"])
    assert [s.rsplit(" ", 2)[0] if s.endswith(" s") else s for s in shown] == STAGES, shown
