"""The playground's pages in headless Chromium at 1280 px and at a true 390 px (device
emulation): a long-summary task opened from the unfiltered list, Runs and Setup with no
word broken mid-way, the form's traps (the default agent, a double start), a run's
settings and outcome shown, a reply not shown twice, and URLs that reload and go Back.

Integration: each test starts Chromium (seconds alone, more under load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from harbor_ray.playground.catalog import Catalog
from tests.playground.served import FakeRollouts, served
from tests.playground.test_browser import ARTIFACTS, WIDTHS
from tests.report.browser import chromium, js_errors, overflow, wait_for

pytestmark = pytest.mark.integration


# Each word of the cells under a selector that the layout split over two lines (words
# split at a hyphen or slash too: "terminus-" then "2" is a wrap, not a broken word).
_BROKEN_WORDS = """
const broken = [];
for (const cell of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/[^\\s\\-\\/:,.]+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                           .map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(match[0]);
    }
  }
}
return broken;"""


def _rect(driver: Any, selector: str) -> dict[str, float]:
    return dict(
        driver.execute_script(
            "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
            "return {left: r.left, top: r.top, width: r.width, height: r.height};",
            selector,
        )
    )


def _text(driver: Any, selector: str) -> str:
    return str(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", selector
        )
    )


def _runs(url: str, driver: Any) -> list[dict[str, Any]]:
    """The visitor's runs, asked with the browser's cookie."""
    cookies = {c["name"]: c["value"] for c in driver.get_cookies()}
    return list(httpx.get(f"{url}/api/runs", cookies=cookies).json()["runs"])


def _open_task(driver: Any, name: str) -> None:
    item = wait_for(
        lambda: [
            li
            for li in driver.find_elements(By.CSS_SELECTOR, "#task-list li")
            if li.text.split("\n")[0] == name
        ],
        what=f"{name} listed",
    )[0]
    item.click()
    wait_for(
        lambda: (
            "task.toml" in _text(driver, "#task-detail")
            and _text(driver, "#task-detail h2") == name
        ),
        what=f"{name}'s detail",
    )
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, "form.run select option"), what="the agents"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_summary_task_opens_from_the_unfiltered_list(
    catalog: Catalog, tmp_path: Path, width: str
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    wide, high, phone = WIDTHS[width]
    with served(catalog, tmp_path) as url, chromium(wide, high, phone=phone) as driver:
        driver.get(url)
        assert driver.execute_script("return window.innerWidth") == wide
        wait_for(lambda: _text(driver, "#task-list"), what="the task list")
        assert overflow(driver) <= 0  # the list's long summaries set no width
        _open_task(driver, "fix-mean")  # its summary is one of the longest
        assert overflow(driver) <= 0
        detail = _rect(driver, "#task-detail")
        form = _rect(driver, "form.run")
        assert detail["width"] >= (0.55 * wide if width == "desktop" else wide - 60)
        assert form["width"] >= 250
        # A tapped task's detail is scrolled into view (on a phone it is below the list).
        assert 0 <= detail["top"] < high / 2
        driver.save_screenshot(str(ARTIFACTS / f"playground-long-task-{width}.png"))
        assert js_errors(driver) == []


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_and_setup_break_no_word_and_the_form_has_no_traps(
    catalog: Catalog, tmp_path: Path, width: str
) -> None:
    wide, high, phone = WIDTHS[width]
    with served(catalog, tmp_path) as url, chromium(wide, high, phone=phone) as driver:
        driver.get(url)
        _open_task(driver, "hello-file")
        form = driver.find_element(By.CSS_SELECTOR, "form.run")
        agent = form.find_element(By.CSS_SELECTOR, "select[name=agent]")
        assert agent.get_attribute("value") == "terminus-2"  # a runnable one, not acp
        assert driver.execute_script(  # an agent not wired is offered greyed
            "return [...arguments[0].options].find(o => o.value === 'acp').disabled", agent
        )
        url_field = form.find_element(By.CSS_SELECTOR, "input[name=llm_url]")
        assert not url_field.is_enabled()  # with the server's engine, it is ignored
        # Two presses before the first answer: one run.
        driver.execute_script(
            "const b = arguments[0].querySelector('button[type=submit]');b.click(); b.click();",
            form,
        )
        wait_for(lambda: "done" in _text(driver, "#run-list"), what="the run done")
        assert len(_runs(url, driver)) == 1
        assert "terminus-2" in _text(driver, "#run-list tbody tr")  # the agent shown
        assert driver.execute_script(
            "return arguments[0].getClientRects().length > 0",
            driver.find_element(By.CSS_SELECTOR, "#run-list tbody td.agent"),
        )
        assert overflow(driver) <= 0
        assert driver.execute_script(_BROKEN_WORDS, "#tab-runs") == []
        driver.save_screenshot(str(ARTIFACTS / f"playground-runs-cards-{width}.png"))
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=setup]").click()
        wait_for(lambda: "container" in _text(driver, "#setup"), what="the setup tab")
        assert overflow(driver) <= 0
        assert driver.execute_script(_BROKEN_WORDS, "#setup") == []
        driver.save_screenshot(str(ARTIFACTS / f"playground-setup-{width}.png"))
        assert js_errors(driver) == []


def test_a_refused_form_says_why_next_to_the_button(catalog: Catalog, tmp_path: Path) -> None:
    with served(catalog, tmp_path) as url, chromium(1280, 800) as driver:
        driver.get(url)
        _open_task(driver, "hello-file")
        driver.execute_script(
            "const f = document.querySelector('form.run');"
            "f.querySelector('input[name=temperature]').value = '5';"
            "f.querySelector('button[type=submit]').click();"
        )
        said = wait_for(lambda: _text(driver, "form.run .error"), what="the refusal")
        assert "temperature" in said
        gap = driver.execute_script(
            "const f = document.querySelector('form.run');"
            "return f.querySelector('.error').getBoundingClientRect().top -"
            " f.querySelector('button[type=submit]').getBoundingClientRect().bottom;"
        )
        assert gap < 60
        assert driver.find_element(
            By.CSS_SELECTOR, "form.run button[type=submit]"
        ).is_enabled()  # free again for the next try


def test_a_run_shows_its_settings_outcome_and_each_reply_once(
    catalog: Catalog, tmp_path: Path
) -> None:
    rollouts = FakeRollouts(calls=3, reward=0.0, system="You are terminus. " * 200)
    with served(catalog, tmp_path, rollouts=rollouts) as url, chromium(1280, 800) as driver:
        driver.get(url)
        _open_task(driver, "hello-file")
        driver.execute_script(
            "const f = document.querySelector('form.run');"
            "f.querySelector('input[name=temperature]').value = '0.2';"
            "f.querySelector('input[name=max_tokens]').value = '64';"
            "f.querySelector('button[type=submit]').click();"
        )
        wait_for(
            lambda: (
                len(driver.find_elements(By.CSS_SELECTOR, "#run-calls .call")) == 3
                and "done" in _text(driver, "#run-detail")
            ),
            what="the run's calls",
        )
        wait_for(lambda: "r0" in _text(driver, "#run-detail .outcomes"), what="the outcome")
        settings = _text(driver, "#run-detail .settings")
        for shown in (
            "temperature 0.2",
            "max tokens 64",
            "budget 20",
            "attempts 1",
            "engine the server's",
            "model test-model",
        ):
            assert shown in settings
        outcome = _text(driver, "#run-detail .outcomes")
        assert "fail" in outcome and "reward 0.000" in outcome
        assert "duration" in _text(driver, "#run-detail") and "agent_execution" in outcome
        assert "calls ended: tool_calls \u00d73 (called a tool)" in outcome
        # Each reply shown once: as the reply, never again as a sent message (the engine's
        # reply had null fields the agent dropped when it sent it back).
        roles = driver.execute_script(
            "return [...document.querySelectorAll('#run-calls .message.sent .role')]"
            ".map(e => e.textContent)"
        )
        assert "assistant" not in roles
        # The long system prompt folded, the short task shown.
        assert driver.execute_script(
            "const m = document.querySelectorAll('#run-calls .call')[0]"
            ".querySelectorAll('.message.sent');"
            "return [m[0].querySelector('details.fold:not([open])') !== null,"
            " m[1].querySelector('details.fold') === null]"
        ) == [True, True]
        assert "temperature 0.2" in _text(driver, "#run-list")
        driver.execute_script(
            "[...document.querySelectorAll('#run-detail button')]"
            ".find(b => b.textContent.startsWith('Run again')).click()"
        )
        wait_for(
            lambda: driver.execute_script(
                "const t = document.querySelector('form.run input[name=temperature]');"
                "return t && t.value === '0.2' && document.querySelector("
                "'form.run input[name=max_tokens]').value === '64'"
            ),
            what="the form refilled",
        )
        assert js_errors(driver) == []


def test_a_run_says_its_stage_before_its_first_call(catalog: Catalog, tmp_path: Path) -> None:
    rollouts = FakeRollouts(hold_s=300)  # held before it lands, no call made
    rollouts.release.clear()
    with served(catalog, tmp_path, rollouts=rollouts) as url, chromium(1280, 800) as driver:
        driver.get(url)
        _open_task(driver, "hello-file")
        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        wait_for(
            lambda: "waiting for its first model call" in _text(driver, "#run-detail"),
            what="the run's stage",
        )
        assert _text(driver, "#run-detail .stages").split("\n")[0].startswith("queued")
        rollouts.release.set()


def test_tasks_runs_and_comparisons_have_urls(catalog: Catalog, tmp_path: Path) -> None:
    # The run at temperature 1 runs other commands: its calls differ from the first's.
    rollouts = FakeRollouts(
        calls=2, command_of=lambda request: "ls" if request.temperature else "step"
    )
    with served(catalog, tmp_path, rollouts=rollouts) as url, chromium(1280, 800) as driver:
        driver.get(f"{url}/task/samples/fix-mean")
        wait_for(lambda: _text(driver, "#task-detail h2") == "fix-mean", what="a task's URL")
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, "form.run select option"),
            what="the agents",
        )
        driver.find_element(By.CSS_SELECTOR, "form.run button[type=submit]").click()
        wait_for(lambda: "/run/" in driver.current_url, what="the run's URL")
        run_id = driver.current_url.rsplit("/", 1)[1]
        driver.refresh()
        wait_for(
            lambda: f"Run {run_id}" in _text(driver, "#run-detail"), what="the run after a reload"
        )
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=runs]").click()
        wait_for(
            lambda: (
                driver.current_url.endswith("/runs")
                and not driver.find_element(By.ID, "run-detail").is_displayed()
            ),
            what="the Runs tab alone",
        )
        driver.back()
        wait_for(
            lambda: (
                f"/run/{run_id}" in driver.current_url
                and f"Run {run_id}" in _text(driver, "#run-detail")
                and driver.find_element(By.ID, "run-detail").is_displayed()
            ),
            what="Back to the run",
        )
        driver.forward()
        wait_for(
            lambda: not driver.find_element(By.ID, "run-detail").is_displayed(),
            what="Forward to the Runs tab alone",
        )
        driver.back()
        driver.back()
        wait_for(
            lambda: (
                _text(driver, "#task-detail h2") == "fix-mean"
                and not driver.find_element(By.ID, "tab-tasks").get_attribute("hidden")
            ),
            what="Back to the task",
        )
        driver.execute_script(
            "const f = document.querySelector('form.run');"
            "f.querySelector('input[name=temperature]').value = '1';"
            "f.querySelector('button[type=submit]').click();"
        )
        wait_for(
            lambda: (
                len(_runs(url, driver)) == 2
                and f"/run/{run_id}" not in driver.current_url
                and "/run/" in driver.current_url
            ),
            what="a second run",
        )
        ids = [r["id"] for r in _runs(url, driver)]
        driver.get(f"{url}/compare/{ids[0]},{ids[1]}")
        wait_for(
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "#compare .compare-head")) == 2,
            what="a comparison's URL",
        )
        differs = driver.execute_script(  # what differs between them, marked
            "return [...document.querySelectorAll('#compare .settings .differs')]"
            ".map(e => e.textContent)"
        )
        assert sorted(differs) == ["temperature 1", "temperature the agent's"]
        wait_for(
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "#compare .compare-cell")) == 4,
            what="both runs' calls",
        )
        assert len(driver.find_elements(By.CSS_SELECTOR, "#compare .compare-cell.differs")) == 4
        driver.get(f"{url}/task/x")
        said = wait_for(lambda: _text(driver, "#task-detail .error"), what="an unknown task")
        assert "x" in said and "/task/" in said
        assert driver.find_element(By.ID, "tabs").is_displayed()  # the app, not a bare 404
        assert js_errors(driver) == []
        driver.get(f"{url}/run/0123456789ab")
        said = wait_for(lambda: _text(driver, "#run-detail .error"), what="an unknown run")
        assert "no such run" in said and "--share-runs" in said
        # Its 404 is logged as a failed load; no script error beside it.
        assert [e for e in js_errors(driver) if e["source"] != "network"] == []
    with served(catalog, tmp_path) as url:
        missing = httpx.get(f"{url}/no/such/page")
        assert missing.status_code == 404 and "playground" in missing.text
        assert 'href="/"' in missing.text
