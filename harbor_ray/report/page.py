"""The report as one self-contained HTML file: opens from disk, with no server and no
network. plotly.js, the viewer's scripts (tokens.js: the token view) and style, and the document
are all inline.

The document goes into a `<script type="application/json">` element with every `<`
escaped (`\\u003c`, the same string to JSON), so no stored message can close the element
or inject markup; the viewer writes stored text with `textContent`, never as HTML.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources

from plotly.offline import get_plotlyjs

__all__ = ["asset", "json_script", "page_head", "render_page", "token_view_script"]


@cache
def asset(name: str) -> str:
    """A file of `harbor_ray/report/assets/`."""
    return resources.files("harbor_ray.report").joinpath("assets", name).read_text()


def page_head(title: str, style: str = "") -> str:
    """A page's start up to `<body>`: the report's style (and `style` after it), and
    plotly.js inline."""
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            '<link rel="icon" href="data:,">',  # else the browser fetches /favicon.ico
            f"<style>{asset('report.css')}{style}</style>",
            f"<script>{get_plotlyjs()}</script></head>\n<body>",
        ]
    )


def json_script(element_id: str, document: bytes) -> str:
    """`document` (JSON) in a `<script type="application/json">`, every `<` escaped."""
    data = document.decode().replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{data}</script>'


def token_view_script() -> str:
    """The token view (HarborTokens, tokens.js), for any page that shows recorded ids."""
    return asset("tokens.js")


def render_page(document: bytes, *, title: str, live_poll_s: float | None = None) -> str:
    """The page of `document` (report_json's output). With `live_poll_s`, the page asks
    the server it came from for a newer document every that many seconds (live.py)."""
    live = "null" if live_poll_s is None else f'{{"poll_ms": {int(live_poll_s * 1000)}}}'
    return "".join(
        [
            page_head(title),
            asset("body.html"),
            json_script("report-data", document),
            f"<script>window.HARBOR_REPORT_LIVE = {live};</script>",
            f"<script>{asset('tokens.js')}</script>",
            f"<script>{asset('viewer.js')}</script>",
            "</body></html>\n",
        ]
    )
