"""The playground in headless Chromium at desktop and phone widths: tasks filtered as
you type, a task opened, a run started from the page and seen landing, no JavaScript
errors, no horizontal overflow; a path out of a task refused. Screenshots into
test-artifacts/ (docs/playground-*.png are copies of them).

Integration: each test starts Chromium (seconds alone, more under load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from harbor_ray.playground.catalog import Catalog
from tests.playground.served import served
from tests.report.browser import chromium, js_errors, wait_for

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


def _overflow(driver) -> int:  # type: ignore[no-untyped-def]
    return int(driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def _texts(driver, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


@pytest.mark.parametrize("width", WIDTHS)
def test_tasks_runs_and_setup_in_the_browser(catalog: Catalog, tmp_path: Path,
                                             width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with served(catalog, tmp_path) as url, chromium(*WIDTHS[width]) as driver:
        driver.get(url)
        wait_for(lambda: _texts(driver, "#task-list li"), what="the task list")
        box = driver.find_element(By.ID, "task-filter")
        box.send_keys("hello-file")
        names = wait_for(lambda: [t.split("\n")[0] for t in _texts(driver, "#task-list li")]
                         if len(_texts(driver, "#task-list li")) == 1 else None,
                         what="the filtered list")
        assert names == ["hello-file"]
        driver.find_element(By.CSS_SELECTOR, "#task-list li").click()
        wait_for(lambda: "task.toml" in driver.find_element(By.ID, "task-detail").text,
                 what="the task's files")
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "form.run select option"),
                 what="the agents")
        assert _overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-tasks-{width}.png"))

        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        wait_for(lambda: "done" in driver.find_element(By.ID, "run-list").text,
                 what="the run done")
        row = driver.find_element(By.CSS_SELECTOR, "#run-list tbody tr")
        assert "0.500" in row.text and "hello-file" in row.text
        wait_for(lambda: "r0" in driver.find_element(By.ID, "run-detail").text,
                 what="the run's rollouts")
        assert _overflow(driver) <= 0
        driver.save_screenshot(str(ARTIFACTS / f"playground-runs-{width}.png"))

        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=setup]").click()
        wait_for(lambda: "oracle" in driver.find_element(By.ID, "setup").text,
                 what="the setup tab")
        assert "s3cret" not in driver.page_source
        assert _overflow(driver) <= 0
        assert js_errors(driver) == []


def test_a_path_out_of_a_task_is_refused_in_the_browser(catalog: Catalog,
                                                        tmp_path: Path) -> None:
    with served(catalog, tmp_path) as url, chromium() as driver:
        driver.get(f"{url}/api/file?dataset=samples&task=hello-file&path=../fix-mean/task.toml")
        reply = json.loads(driver.find_element(By.TAG_NAME, "body").text)
        assert "error" in reply and "[environment]" not in driver.page_source
