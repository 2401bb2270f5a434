"""A comparison as one self-contained HTML page (no server, no network): its method and
notes, its plots and its tables. Pure.

The tables are written here as HTML (every cell escaped); the plots are drawn in the
browser by plotly.js from the embedded document, which also holds the comparison's
figures in full (`window.harborCompare.comparison`, as `--format json` writes them).
"""

from __future__ import annotations

import html

import orjson
import plotly.io as pio

from harbor_ray.report.comparison import Comparison
from harbor_ray.report.comparison_figures import comparison_plots
from harbor_ray.report.comparison_tables import METHOD, Table, comparison_tables, title
from harbor_ray.report.page import asset, json_script, page_head

__all__ = ["comparison_document", "render_comparison_page"]

# Wide tables scroll in their own box, so a phone's page never scrolls sideways.
_STYLE = (
    ".table-box { overflow-x: auto; margin-bottom: 1em; }"
    " table.comparison { border-collapse: collapse; font-size: 0.9em; }"
    " table.comparison th, table.comparison td { border: 1px solid #ddd;"
    " padding: 0.2em 0.5em; text-align: left; vertical-align: top; }"
    " #notes { padding-left: 1.8em; } #notes li { margin: 0.2em 0; }"
)


def comparison_document(comparison: Comparison) -> bytes:
    """The page's data: the comparison's figures and its plots (plotly's JSON)."""
    return orjson.dumps(
        {
            "comparison": comparison.to_dict(),
            "plots": [
                {
                    "id": p.id,
                    "title": p.title,
                    "caption": p.caption,
                    "figure": orjson.Fragment(pio.to_json(p.figure, validate=False)),
                }
                for p in comparison_plots(comparison)
            ],
        }
    )


def _table(table: Table) -> str:
    cells = "".join(f'<th scope="col">{html.escape(h)}</th>' for h in table.header)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    return (
        f'<div class="table-box" id="table-{table.id}"><h2>{html.escape(table.title)}'
        f'</h2><p class="caption">{html.escape(table.caption)}</p>'
        f'<table class="comparison"><thead><tr>{cells}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def render_comparison_page(comparison: Comparison) -> str:
    heading = title(comparison)
    method = METHOD.format(
        pass_reward=comparison.pass_reward, level=comparison.level, baseline=comparison.baseline
    )
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in comparison.notes)
    return "".join(
        [
            page_head(heading, _STYLE),
            f'<header><h1 id="compare-title">{html.escape(heading)}</h1>',
            f'<p id="method">{html.escape(method)}</p>',
            f'<ul id="notes" class="warning">{notes}</ul>' if notes else "",
            '<nav><a href="#plots">Plots</a> · <a href="#tables">Tables</a></nav></header>',
            '<main><section id="plots"></section><section id="tables">',
            "".join(_table(table) for table in comparison_tables(comparison)),
            "</section></main>",
            json_script("compare-data", comparison_document(comparison)),
            f"<script>{asset('compare.js')}</script>",
            "</body></html>\n",
        ]
    )
