"""`harbor-ray info`'s harness table: every harness Harbor knows, qualified or why not."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Console

from harbor_ray.info import render_harnesses
from harbor_ray.qualify.harnesses import NOT_QUALIFIED, harbor_harnesses, harness_table


def test_info_shows_every_harness_with_qualified_or_its_reason() -> None:
    rows = [asdict(h) for h in harness_table(harbor_harnesses())]
    console = Console(record=True, width=400)
    render_harnesses(rows, console)
    shown = console.export_text()
    assert (
        f"Harbor's harnesses ({len(rows)}; 21 qualified at level 1, 21 of them also at level 2"
    ) in shown
    lines = {
        line.split("│")[1].strip(): line for line in shown.splitlines() if line.count("│") >= 3
    }
    assert set(lines) - {"harness", ""} == {row["name"] for row in rows}
    assert "│ yes " in lines["codex"]
    assert NOT_QUALIFIED["goose"] in lines["goose"] and "│ no " in lines["goose"]
