"""`--proxy-url`/`--proxy-bind`: nothing listens off loopback unless a URL is given; when
one is, a relay on each node listens there from the proxy's start to its stop, whether
or not any rollout host is alive (the multi-node file runs agents through it)."""

import socket
from collections.abc import Iterator

import httpx
import pytest

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.cluster.ingress import remote_endpoint, start_capture_proxy, stop_capture_proxy
from harbor_ray.errors import ServeError
from harbor_ray.info import needs_proxy_url
from tests.fixtures.fake_engine import free_port
from tests.fixtures.threaded import fake_engine_in_thread


def test_nothing_is_bound_without_a_proxy_url() -> None:
    assert remote_endpoint("direct", None, None) is None
    with pytest.raises(ValueError, match="needs --proxy-url"):
        remote_endpoint("direct", None, "0.0.0.0:8770")


def test_the_relays_listen_where_the_url_lands() -> None:
    assert remote_endpoint("direct", "http://lb.example:8770/x", None) == ("0.0.0.0", 8770)
    assert remote_endpoint("direct", "http://lb.example:8770", "10.0.0.2:9000") == (
        "10.0.0.2",
        9000,
    )


@pytest.mark.parametrize(
    ("ingress", "url", "bind", "message"),
    [
        ("host", "http://a:1", None, "needs --ingress direct"),
        ("serve", "http://a:1", None, "needs --ingress direct"),
        ("direct", "http://a", None, "HOST:PORT"),
        ("direct", "https://a:1", None, "HOST:PORT"),
        ("direct", "http://a:1", "nope", "HOST:PORT"),
    ],
)
def test_unusable_settings_are_refused(ingress, url, bind, message) -> None:
    with pytest.raises(ValueError, match=message):
        remote_endpoint(ingress, url, bind)


def test_info_says_which_backends_need_it() -> None:
    assert not needs_proxy_url("local")
    assert all(needs_proxy_url(b) for b in ("docker", "modal", "e2b", "daytona"))


@pytest.fixture(scope="module")
def echo_engine_url(ray_cluster: None) -> Iterator[str]:
    with fake_engine_in_thread(FakeEngine()) as (_, url):
        yield url


@pytest.mark.integration
def test_the_entry_relay_serves_before_any_host_and_closes_with_the_proxy(
    echo_engine_url: str,
) -> None:
    port = free_port()
    proxy = start_capture_proxy(
        echo_engine_url,
        "fake-model",
        ingress="direct",
        replicas=1,
        remote_url=f"http://127.0.0.1:{port}",
        remote_bind=f"127.0.0.1:{port}",
    )
    try:
        # No rollout host exists: the answer comes from a replica, through the relay.
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert health.status_code == 200 and health.json()["instance"]
        refused = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers={"authorization": "Bearer not-a-key"},
            json={"model": "fake-model", "messages": []},
            timeout=10,
        )
        assert refused.status_code == 401
    finally:
        stop_capture_proxy(proxy)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


@pytest.mark.integration
def test_a_taken_port_fails_the_start_naming_it(echo_engine_url: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ServeError, match=f"127.0.0.1:{port}.*--proxy-bind"):
            start_capture_proxy(
                echo_engine_url,
                "fake-model",
                ingress="direct",
                replicas=1,
                remote_url=f"http://127.0.0.1:{port}",
                remote_bind=f"127.0.0.1:{port}",
            )
    # Nothing of that start is left: the next one deploys, and listens, as usual.
    proxy = start_capture_proxy(
        echo_engine_url,
        "fake-model",
        ingress="direct",
        replicas=1,
        remote_url=f"http://127.0.0.1:{port}",
        remote_bind=f"127.0.0.1:{port}",
    )
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        stop_capture_proxy(proxy)
