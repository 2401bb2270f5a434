"""`harbor-ray view` under hostile input (issue 27): only the Host names it is served at
(no DNS rebinding), no 5xx for any path, query or header, and a burst of requests at once
answered whole. Over loopback, from a thread of this process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from harbor_ray.cli import app as cli
from harbor_ray.report.live import LiveReport, build_view_app, view_in_thread
from tests.fixtures.threaded import serve_in_thread
from tests.report.datasets import sample_records, write_dataset

ROUTES = ("/", "/data.json", "/version")


@pytest.fixture(scope="module")
def view_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = write_dataset(tmp_path_factory.mktemp("view") / "out", sample_records())
    with view_in_thread(out) as url:
        yield url


def test_the_view_answers_only_the_host_names_it_is_served_at(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", sample_records())
    with view_in_thread(out) as url:
        for route in ROUTES:
            for host in ("evil.example", "evil.example:8766", "localhost.evil.example"):
                reply = httpx.get(f"{url}{route}", headers={"host": host})
                assert reply.status_code == 421, (route, host, reply.status_code)
                assert b"rollout" not in reply.content
            for host in ("127.0.0.1:8766", "localhost", "[::1]:1"):
                assert httpx.get(f"{url}{route}", headers={"host": host}).status_code == 200


def test_more_host_names_can_be_allowed(tmp_path: Path) -> None:
    app = build_view_app(
        LiveReport(write_dataset(tmp_path / "out", sample_records())), allowed_hosts=("viewer.lan",)
    )
    with serve_in_thread(app) as url:
        assert httpx.get(f"{url}/version", headers={"host": "viewer.lan:80"}).status_code == 200
        assert httpx.get(f"{url}/version").status_code == 421  # only what is listed


def test_the_flag_is_in_help() -> None:
    result = CliRunner().invoke(cli, ["view", "--help"], terminal_width=200)
    assert result.exit_code == 0 and "--allowed-host" in result.output


HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    path=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60),
    host=st.one_of(st.just("127.0.0.1"), HEADER_VALUE),
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]),
)
def test_no_request_gets_a_5xx(view_url: str, path: str, host: str, method: str) -> None:
    reply = httpx.request(method, f"{view_url}/{path.lstrip('/')}", headers={"host": host})
    assert reply.status_code < 500, (method, path, host, reply.status_code)


def test_a_burst_of_requests_is_answered_whole(view_url: str) -> None:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=view_url, timeout=60) as client:
            replies = await asyncio.gather(*(client.get(ROUTES[i % 3]) for i in range(200)))
        return [r.status_code for r in replies]

    assert set(asyncio.run(burst())) == {200}
