"""A dataset directory to its report page, and the page to `OUT/report.html`."""

from __future__ import annotations

import os
from pathlib import Path

from harbor_ray.report.document import report_json
from harbor_ray.report.page import render_page
from harbor_ray.report.tables import dataset_version, read_tables

__all__ = ["REPORT_FILE", "report_document", "write_report"]

REPORT_FILE = "report.html"


def report_document(out: str | os.PathLike[str], *, pass_reward: float = 1.0) -> bytes:
    """The report document of the committed rows at `out` (see document.py)."""
    version = dataset_version(out)  # before reading: a commit in between shows next time
    return report_json(read_tables(out), source=str(out), version=version,
                       pass_reward=pass_reward)


def write_report(out: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                 *, pass_reward: float = 1.0) -> Path:
    """Write the report of `out` to `dest` (default `OUT/report.html`); return its path.

    Written to a hidden name and renamed, so a browser never opens half a page."""
    path = Path(dest) if dest is not None else Path(out) / REPORT_FILE
    page = render_page(report_document(out, pass_reward=pass_reward),
                       title=f"harbor_ray report: {out}")
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(page)
    os.replace(temp, path)
    return path
