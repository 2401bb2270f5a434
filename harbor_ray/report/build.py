"""A dataset directory to its report page, and the page to `OUT/report.html`."""

from __future__ import annotations

import os
from pathlib import Path

from harbor_ray.report.document import report_json
from harbor_ray.report.page import render_page
from harbor_ray.report.tables import dataset_version, read_tables, served_model, token_ids_used
from harbor_ray.report.tokenizer import Tokenizers, token_section

__all__ = ["REPORT_FILE", "report_document", "write_atomically", "write_report"]

REPORT_FILE = "report.html"


def report_document(
    out: str | os.PathLike[str], *, pass_reward: float = 1.0, tokenizers: Tokenizers | None = None
) -> bytes:
    """The report document of the committed rows at `out` (see document.py), with the
    token text of the served model's tokenizer when `tokenizers` finds it here."""
    version = dataset_version(out)  # before reading: a commit in between shows next time
    tables = read_tables(out)
    found = (tokenizers or Tokenizers()).for_model(served_model(tables))
    return report_json(
        tables,
        source=str(out),
        version=version,
        pass_reward=pass_reward,
        tokens=token_section(found, token_ids_used(tables.turns)),
    )


def write_report(
    out: str | os.PathLike[str],
    dest: str | os.PathLike[str] | None = None,
    *,
    pass_reward: float = 1.0,
    tokenizer: str | None = None,
) -> Path:
    """Write the report of `out` to `dest` (default `OUT/report.html`); return its path.
    `tokenizer`: a directory or local Hugging Face name to decode ids with (default:
    the served model's, when it is on this machine).

    Written to a hidden name and renamed (write_atomically)."""
    path = Path(dest) if dest is not None else Path(out) / REPORT_FILE
    document = report_document(out, pass_reward=pass_reward, tokenizers=Tokenizers(tokenizer))
    return write_atomically(path, render_page(document, title=f"harbor_ray report: {out}"))


def write_atomically(path: Path, text: str) -> Path:
    """Write `text` to `path` through a hidden name and rename it, so a reader (a
    browser, CI) never opens half a file; return `path`."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)
    return path
