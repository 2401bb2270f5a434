"""No module of the package is longer than the bound docs/architecture.md's Style
section states (read from there, so the doc and the check cannot drift apart): a module
past it has more than one job, and is split (a data table apart from its logic)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STYLE = (ROOT / "docs" / "architecture.md").read_text()


def test_no_module_is_over_the_bound_the_style_states() -> None:
    [bound] = re.findall(r"at most (\d+) lines a module", STYLE)
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in (ROOT / "harbor_ray").rglob("*.py")
    }
    assert sizes, "no module found"
    assert {p: n for p, n in sizes.items() if n > int(bound)} == {}
