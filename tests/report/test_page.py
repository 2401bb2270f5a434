from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import orjson

from harbor_ray.data.result import RanIn
from harbor_ray.report import report_document, write_report
from harbor_ray.report.page import render_page
from tests.data.rollouts import rich_session, rollout
from tests.report.datasets import write_dataset

HOSTILE = "</script><script>window.pwned = 1</script><!--"


def _data_element(page: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    return json.loads(match.group(1))


def test_the_page_embeds_everything_and_no_stored_text_escapes(tmp_path: Path) -> None:
    turns = rich_session()
    turns[0] = dataclasses.replace(
        turns[0], response_message_json=orjson.dumps({"role": "assistant", "content": HOSTILE})
    )
    out = write_dataset(tmp_path / "out", [rollout("a1", turns)])
    path = write_report(out)
    page = path.read_text()
    assert path == out / "report.html"
    # Self-contained: no script or stylesheet fetched from anywhere.
    assert not re.search(r'<script[^>]+src=|<link[^>]+href="(?!data:)', page)
    assert "Plotly" in page
    assert HOSTILE not in page
    document = _data_element(page)
    assert document == json.loads(report_document(out))
    replies = [t["response"]["content"] for t in document["traces"]["a1"]["turns"]]
    assert HOSTILE in replies


def test_a_live_page_polls_and_a_file_does_not() -> None:
    document = b'{"version": "1"}'
    assert "window.HARBOR_REPORT_LIVE = null;" in render_page(document, title="t")
    live = render_page(document, title="t", live_poll_s=0.5)
    assert 'window.HARBOR_REPORT_LIVE = {"poll_ms": 500};' in live


def test_the_report_counts_where_rollouts_ran_and_warns_of_the_hosts_userland(
    tmp_path: Path,
) -> None:
    out = write_dataset(
        tmp_path / "out",
        [
            rollout("a1", rich_session()),  # the task's image
            rollout("b1", rich_session(), environment=RanIn.HOST_OVERRIDE, image_digest=None),
            rollout("c1", rich_session(), environment=RanIn.HOST_OVERRIDE, image_digest=None),
            rollout("d1", None, environment=None, image_digest=None, ok=False),  # never started
        ],
    )
    document = json.loads(report_document(out))

    assert document["totals"]["environments"] == {"image": 1, "host_override": 2, "unknown": 1}
    # The page turns a host_override count into a warning beside the summary.
    page = write_report(out).read_text()
    assert 'id="report-warning"' in page and "envs.host_override" in page
