from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from harbor_ray.data.writer import DatasetWriter
from harbor_ray.report.live import LiveReport, build_view_app
from tests.data.rollouts import rich_session, rollout
from tests.report.datasets import sample_records, write_dataset


def test_the_view_serves_new_rows_as_they_are_committed(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", sample_records())
    client = TestClient(
        build_view_app(LiveReport(out), poll_s=0.5), base_url="http://127.0.0.1:8766"
    )
    first = client.get("/version").text
    assert len(client.get("/data.json").json()["rollouts"]) == 3
    page = client.get("/")
    assert page.status_code == 200 and '"poll_ms": 500' in page.text

    writer = DatasetWriter(out, {"agent": "terminus-2"})
    writer.add(rollout("d1", rich_session()))
    writer.flush()
    assert client.get("/version").text != first
    document = client.get("/data.json").json()
    assert [r["rollout_id"] for r in document["rollouts"]] == ["a1", "b1", "c1", "d1"]
    assert document["version"] == client.get("/version").text
    assert "d1" in json.dumps(document["traces"]["d1"]["rollout_id"])
