"""The qualification reports checked in under docs/ are what the renderer makes of their
JSON: a table edited by hand, or a JSON without its table, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.qualify.report import QualifyReport, render_markdown

REPORTS = Path(__file__).resolve().parents[2] / "docs" / "qualification"


@pytest.mark.parametrize(
    "report", sorted(REPORTS.glob("qualification-*.json")), ids=lambda path: path.stem
)
def test_each_checked_in_table_is_its_json_rendered(report: Path) -> None:
    parsed = QualifyReport.model_validate_json(report.read_text())
    assert report.with_suffix(".md").read_text() == render_markdown(parsed)


def test_every_checked_in_table_has_its_json() -> None:
    tables = {path.stem for path in REPORTS.glob("qualification-*.md")}
    assert tables and tables == {path.stem for path in REPORTS.glob("qualification-*.json")}
