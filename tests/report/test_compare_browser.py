"""The comparison page in headless Chromium, on real sweeps' datasets: it opens from disk
with nothing fetched, draws its plots, shows the rows' numbers and its notes, and fits a
phone's width."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from harbor_ray.report.compare import compare_datasets, write_comparison
from harbor_ray.report.comparison_provenance import FIELDS
from tests.report.browser import chromium, js_errors, wait_for
from tests.report.by_hand import score_test_bounds
from tests.report.test_browser import ARTIFACTS
from tests.report.test_compare_sweeps import task_counts

pytestmark = pytest.mark.integration

PLOTS = ["pass-at-k", "difference", "by-task"]
TABLES = ["runs", "pass-at-k", "where", "tasks", "error-types", "provenance"]


def _cells(driver, table: str) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#table-{table} tbody tr")
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]


@pytest.mark.parametrize(("width", "name"), [(1400, "desktop"), (390, "phone")])
def test_the_comparison_page(
    compared_sweeps: dict[str, Path], tmp_path: Path, width: int, name: str
) -> None:
    outs = [compared_sweeps[m] for m in ("base-model", "trained-model", "hosted-model")]
    page = write_comparison(compare_datasets(outs), "html", tmp_path / "compare.html")
    # Nothing is fetched: no element loads a URL (plotly.js and the data are inline).
    assert not re.search(
        r"<(script|link|img|iframe)[^>]+(src|href)=\"(https?:)?//", page.read_text()
    )
    with chromium(width=width, height=900) as driver:
        driver.get(page.as_uri())
        doc = wait_for(
            lambda: driver.execute_script("return window.harborCompare"), what="the page"
        )
        boxes = driver.find_elements(By.CSS_SELECTOR, "#plots .plot")
        assert [b.get_attribute("id") for b in boxes] == [f"plot-{p}" for p in PLOTS]
        for box in boxes:
            wait_for(
                lambda box=box: box.find_elements(By.CSS_SELECTOR, ".main-svg"),
                what=box.get_attribute("id"),
            )
            assert driver.execute_script(
                "return !!arguments[0].querySelector('.figure')._fullLayout", box
            )
        # The pass@k plot draws each run's figures, error bars included.
        drawn = driver.execute_script(
            "return document.querySelector('#plot-pass-at-k .figure').data"
            ".map(t => [t.name, Array.from(t.y), t.error_y.array.length])"
        )
        assert drawn == [
            [run["label"], [e["value"] for e in run["pass_at_k"]], 2]
            for run in doc["comparison"]["runs"]
        ]

        assert [
            b.get_attribute("id")
            for b in driver.find_elements(By.CSS_SELECTOR, "#tables .table-box")
        ] == [f"table-{t}" for t in TABLES]
        # The runs table's pass rate is the rows' (computed here), with its interval.
        shared = ["count-words", "hello-file"]
        for row, out in zip(_cells(driver, "runs"), outs, strict=True):
            counts = task_counts(out)
            passes, n = (sum(counts[t][i] for t in shared) for i in (0, 1))
            low, high = score_test_bounds(passes, n)
            assert row[0] == out.name
            assert row[5] == f"{passes / n:.2f} [{low:.2f}, {high:.2f}]"
        assert [row[0] for row in _cells(driver, "tasks")] == shared
        # One provenance row per field the rows record: each run's values, and "differs"
        # where they do.
        provenance = _cells(driver, "provenance")
        assert [row[0] for row in provenance] == list(FIELDS)
        for row in provenance:
            values, differs = row[1:-1], row[-1]
            assert len(values) == len(outs) and differs == (
                "yes" if len(set(values)) > 1 else "no"
            ), row
        notes = driver.find_element(By.ID, "notes").text
        assert "fix-mean" in notes and "greet-function" in notes and "k=2" in notes

        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {width}px"
        ARTIFACTS.mkdir(exist_ok=True)
        assert driver.save_screenshot(str(ARTIFACTS / f"compare-{name}.png"))
        assert js_errors(driver) == []
