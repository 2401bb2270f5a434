"""The playground in headless Chromium at desktop and phone widths: tasks filtered as
you type, a task opened, a run started from the page showing its first model call while
the rollout is held open (then landing), two runs side by side, no JavaScript errors,
no horizontal overflow; a path out of a task refused. Screenshots into
test-artifacts/ (docs/playground-*.png are copies of them).

Integration: each test starts Chromium (seconds alone, more under load)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from harbor_ray.playground.calls import PAGE
from harbor_ray.playground.catalog import Catalog
from tests.playground.served import FakeRollouts, served
from tests.report.browser import chromium, js_errors, overflow, wait_for

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# A phone's 390 px by device emulation (a headless window is never under 500 px).
WIDTHS = {"desktop": (1280, 800, False), "phone": (390, 844, True)}
CALLS = PAGE + 2


def _texts(driver, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    # Read in one script: the page redraws what it polls, and an element found by one
    # call can be gone by the next.
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", selector
        )
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_tasks_runs_and_setup_in_the_browser(catalog: Catalog, tmp_path: Path, width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    # Each rollout records its first call, then holds until released: the page must
    # show that call while the rollout is still open. Then more calls than one read
    # of /api/calls returns.
    rollouts = FakeRollouts(calls=CALLS, hold_s=300)
    rollouts.release.clear()
    with (
        served(catalog, tmp_path, rollouts=rollouts, token_pieces=_word_per_id) as url,
        chromium(*WIDTHS[width][:2], phone=WIDTHS[width][2]) as driver,
    ):
        driver.get(url)
        assert driver.execute_script("return window.innerWidth") == WIDTHS[width][0]
        wait_for(lambda: _texts(driver, "#task-list li"), what="the task list")
        box = driver.find_element(By.ID, "task-filter")
        box.send_keys("hello-file")
        names = wait_for(
            lambda: (
                [t.split("\n")[0] for t in _texts(driver, "#task-list li")]
                if len(_texts(driver, "#task-list li")) == 1
                else None
            ),
            what="the filtered list",
        )
        assert names == ["hello-file"]
        driver.find_element(By.CSS_SELECTOR, "#task-list li").click()
        wait_for(
            lambda: "task.toml" in driver.find_element(By.ID, "task-detail").text,
            what="the task's files",
        )
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, "form.run select option"),
            what="the agents",
        )
        assert overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-tasks-{width}.png"))

        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        first = wait_for(lambda: _texts(driver, "#run-calls .call"), what="the first call")
        assert len(first) == 1 and "call 1" in first[0] and "bash" in first[0]
        assert "running" in driver.find_element(By.ID, "run-list").text
        assert "r0" not in driver.find_element(By.ID, "run-detail").text  # not landed
        assert overflow(driver) <= 0
        rollouts.release.set()
        wait_for(lambda: len(_texts(driver, "#run-calls .call")) == CALLS, what="every call")
        wait_for(lambda: "done" in driver.find_element(By.ID, "run-list").text, what="the run done")
        row = driver.find_element(By.CSS_SELECTOR, "#run-list tbody tr")
        assert "0.500" in row.text and "hello-file" in row.text
        wait_for(
            lambda: "r0" in driver.find_element(By.ID, "run-detail").text, what="the run's rollouts"
        )
        token_section = driver.find_element(By.CSS_SELECTOR, "#run-calls details.tokens")
        token_section.click()
        # The report's token view: each id as its text, a toggle to the ids.
        wait_for(
            lambda: token_section.find_elements(By.CSS_SELECTOR, ".tok.sampled"),
            what="the call's tokens",
        )
        first = token_section.find_element(By.CSS_SELECTOR, ".tok.sampled")
        assert first.text.strip() == "w0" and first.get_attribute("data-logprob") == "-2"
        token_section.find_element(By.CSS_SELECTOR, ".token-toggle").click()
        wait_for(
            lambda: token_section.find_element(By.CSS_SELECTOR, ".tok.sampled").text.strip() == "0",
            what="the ids",
        )
        assert overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-run-view-{width}.png"))

        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=tasks]").click()
        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        wait_for(
            lambda: (
                len(_texts(driver, "#run-list tbody tr")) == 2
                and "running" not in driver.find_element(By.ID, "run-list").text
            ),
            what="the second run done",
        )
        assert overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-runs-{width}.png"))
        # Clicked and measured in one script each: the page redraws these as it polls.
        driver.execute_script(
            "document.querySelectorAll('#run-list tbody input').forEach(b => b.click());"
            "document.getElementById('compare-runs').click();"
        )
        heads = wait_for(
            lambda: _texts(driver, "#compare .compare-head"), what="the side-by-side view"
        )
        assert len(heads) == 2
        wait_for(
            lambda: len(_texts(driver, "#compare .compare-cell")) == 2 * CALLS,
            what="every call of each run",
        )
        tops = driver.execute_script(
            "return [...document.querySelectorAll('#compare .compare-cell')].slice(0, 2)"
            ".map(c => c.getBoundingClientRect().top);"
        )
        assert (tops[0] == tops[1]) == (width == "desktop")  # columns, or stacked
        assert not driver.find_elements(By.CSS_SELECTOR, "#compare .differs")  # the same
        assert overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-compare-{width}.png"))

        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=setup]").click()
        wait_for(lambda: "oracle" in driver.find_element(By.ID, "setup").text, what="the setup tab")
        assert "s3cret" not in driver.page_source
        assert overflow(driver) <= 0
        assert js_errors(driver) == []


def test_a_path_out_of_a_task_is_refused_in_the_browser(catalog: Catalog, tmp_path: Path) -> None:
    with served(catalog, tmp_path) as url, chromium() as driver:
        driver.get(f"{url}/api/file?dataset=samples&task=hello-file&path=../fix-mean/task.toml")
        reply = json.loads(driver.find_element(By.TAG_NAME, "body").text)
        assert "error" in reply and "[environment]" not in driver.page_source


def _word_per_id(model: str, ids: list[int]) -> dict[str, Any]:
    """A stand-in tokenizer's table: id N reads `wN`."""
    return {"pieces": {str(i): ["t", f"w{i}"] for i in ids}, "note": "stand-in"}
