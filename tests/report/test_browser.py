"""The report and the live view in headless Chromium, on a real sweep's dataset."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from harbor_ray.data.writer import DatasetWriter
from harbor_ray.report import write_report
from harbor_ray.report.live import view_in_thread
from tests.data.rollouts import rich_session, rollout
from tests.report.browser import chromium, js_errors, wait_for
from tests.report.conftest import ATTEMPTS, TASKS

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PLOTS = [
    "reward-by-task",
    "pass-at-k",
    "error-types",
    "findings",
    "turns-tokens",
    "phase-times",
    "engine-over-time",
]


def _rows(driver) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "#rollout-list tbody tr")


def rewards_by_task(out: Path) -> dict[str, list[float]]:
    """Every rollout's reward in the dataset, by task (those without one left out)."""
    rewards: dict[str, list[float]] = {}
    for row in pq.read_table(out / "rollouts", columns=["task", "reward"]).to_pylist():
        if row["reward"] is not None:
            rewards.setdefault(row["task"], []).append(row["reward"])
    return {task: sorted(values) for task, values in rewards.items()}


def stored_ids(out: Path, rollout_id: str) -> list[tuple[int, float | None]]:
    """`rollout_id`'s sampled ids and their logprobs in the dataset, turn by turn."""
    turns = pq.read_table(
        out / "turns", columns=["rollout_id", "index", "token_ids", "logprobs"]
    ).to_pylist()
    ours = sorted((t for t in turns if t["rollout_id"] == rollout_id), key=lambda t: t["index"])
    return [(i, lp) for t in ours for i, lp in zip(t["token_ids"], t["logprobs"], strict=True)]


def assert_shows_the_dataset_s_ids(tokens: list, out: Path, rollout_id: str) -> None:
    """The viewer's sampled ids for `rollout_id`, in order, are its turns' in the
    dataset (by turn index), each with its logprob (shown to 4 places) or none."""
    stored = stored_ids(out, rollout_id)
    shown = [(int(t.text), t.get_attribute("data-logprob")) for t in tokens]
    assert len(shown) == len(stored) > 0, (len(shown), len(stored))
    for k, ((id_shown, lp_shown), (id_stored, lp_stored)) in enumerate(
        zip(shown, stored, strict=True)
    ):
        assert id_shown == id_stored, (k, id_shown, id_stored)
        if lp_stored is None or math.isnan(lp_stored):
            assert lp_shown == "none", (k, lp_shown)
        else:
            assert abs(float(lp_shown) - lp_stored) <= 5e-5, (k, lp_shown, lp_stored)


def test_a_sweeps_report_renders_every_plot_and_a_working_viewer(sweep_dataset: Path) -> None:
    page = write_report(sweep_dataset)
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_for(lambda: driver.execute_script("return window.harborReport"), what="the page")
        plots = driver.find_elements(By.CSS_SELECTOR, "#plots .plot")
        assert [p.get_attribute("id") for p in plots] == [f"plot-{i}" for i in PLOTS]
        for plot in plots:
            # Drawn by plotly: its SVG is in the page and its layout was computed.
            assert plot.find_elements(By.CSS_SELECTOR, ".main-svg"), plot.get_attribute("id")
            assert driver.execute_script(
                "return !!arguments[0].querySelector('.figure')._fullLayout", plot
            )
        plotted = driver.execute_script(
            "return [...document.querySelectorAll('#plot-reward-by-task .figure')]"
            ".map(f => f.data.map(t => [t.name, Array.from(t.y)]))"
        )
        assert [{name: sorted(ys) for name, ys in figure} for figure in plotted] == [
            rewards_by_task(sweep_dataset)
        ]

        total = len(TASKS) * ATTEMPTS
        assert len(_rows(driver)) == total
        # Filtering: by task, then by reward (the script solves hello-file only).
        Select(driver.find_element(By.ID, "filter-task")).select_by_value("hello-file")
        assert {r.get_attribute("data-rollout-id").split("__")[0] for r in _rows(driver)} == {
            "hello-file"
        }
        assert driver.find_element(By.ID, "rollout-count").text == f"{ATTEMPTS} of {total} rollouts"
        Select(driver.find_element(By.ID, "filter-task")).select_by_value("")
        driver.find_element(By.ID, "filter-reward-min").send_keys("1")
        solved = _rows(driver)
        assert len(solved) == ATTEMPTS
        assert all(r.get_attribute("data-rollout-id").startswith("hello-file") for r in solved)

        # The rows' sampled ids differ (the fixture numbers each reply), so each row
        # selected must show its own.
        ids = [r.get_attribute("data-rollout-id") for r in solved]
        assert stored_ids(sweep_dataset, ids[0]) != stored_ids(sweep_dataset, ids[1])
        for row, rollout_id in reversed(list(zip(solved, ids, strict=True))):
            row.click()
            wait_for(
                lambda rid=rollout_id: driver.find_elements(
                    By.CSS_SELECTOR, f'tr.selected[data-rollout-id="{rid}"]'
                ),
                what="selected",
            )
            tokens = wait_for(
                lambda: driver.find_elements(By.CSS_SELECTOR, "#trace-turns .tok.sampled"),
                what="sampled ids",
            )
            assert_shows_the_dataset_s_ids(tokens, sweep_dataset, rollout_id)
        scored = [t for t in tokens if t.get_attribute("data-logprob") != "none"]
        assert scored
        for token in tokens:
            assert token.get_attribute("data-mask") in {"0", "1"}
            assert "logprob" in token.get_attribute("title")
        for token in scored:
            assert float(token.get_attribute("data-logprob")) <= 0.0
            # Coloured by its logprob (an id without one has no colour of its own).
            assert token.value_of_css_property("background-color") not in {
                "rgba(0, 0, 0, 0)",
                "transparent",
            }
        assert any(t.get_attribute("data-mask") == "1" for t in scored)
        assert driver.find_element(By.ID, "tokenizer-note").text.startswith("no tokenizer for ")
        assert driver.find_elements(By.CSS_SELECTOR, "#trace-graph li[data-turn]")
        assert driver.find_elements(By.CSS_SELECTOR, ".turn .message")
        ARTIFACTS.mkdir(exist_ok=True)
        driver.execute_script("document.getElementById('trace').scrollIntoView()")
        assert driver.save_screenshot(str(ARTIFACTS / "report-viewer.png"))
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.save_screenshot(str(ARTIFACTS / "report-plots.png"))
        assert js_errors(driver) == []


def test_the_live_view_picks_up_a_new_row(sweep_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "live"
    shutil.copytree(sweep_dataset, out, ignore=shutil.ignore_patterns("trials", "sandboxes"))
    total = len(TASKS) * ATTEMPTS
    with view_in_thread(out, poll_s=0.3) as url, chromium() as driver:
        driver.get(url)
        wait_for(lambda: len(_rows(driver)) == total, what="the sweep's rows")
        _rows(driver)[0].click()
        selected = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "tr.selected"))
        selected_id = selected[0].get_attribute("data-rollout-id")

        writer = DatasetWriter(out, {"agent": "terminus-2"})
        writer.add(rollout("zz-new", rich_session()))
        writer.flush()

        wait_for(lambda: len(_rows(driver)) == total + 1, what="the new row")
        assert driver.find_elements(By.CSS_SELECTOR, 'tr[data-rollout-id="zz-new"]')
        assert driver.find_element(By.ID, "rollout-count").text == (
            f"{total + 1} of {total + 1} rollouts"
        )
        # The open rollout stays open across the update.
        assert (
            driver.find_element(By.CSS_SELECTOR, "tr.selected").get_attribute("data-rollout-id")
            == selected_id
        )
        assert js_errors(driver) == []
