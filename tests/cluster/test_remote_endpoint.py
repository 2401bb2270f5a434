"""`--proxy-url`/`--proxy-bind`: nothing listens off loopback unless a URL is given."""

import pytest

from harbor_ray.cluster.ingress import remote_endpoint
from harbor_ray.info import needs_proxy_url


def test_nothing_is_bound_without_a_proxy_url() -> None:
    assert remote_endpoint("direct", None, None) is None
    with pytest.raises(ValueError, match="needs --proxy-url"):
        remote_endpoint("direct", None, "0.0.0.0:8770")


def test_the_relays_listen_where_the_url_lands() -> None:
    assert remote_endpoint("direct", "http://lb.example:8770/x", None) == ("0.0.0.0", 8770)
    assert remote_endpoint("direct", "http://lb.example:8770", "10.0.0.2:9000") == (
        "10.0.0.2", 9000)


@pytest.mark.parametrize(("ingress", "url", "bind", "message"), [
    ("host", "http://a:1", None, "needs --ingress direct"),
    ("serve", "http://a:1", None, "needs --ingress direct"),
    ("direct", "http://a", None, "HOST:PORT"),
    ("direct", "https://a:1", None, "HOST:PORT"),
    ("direct", "http://a:1", "nope", "HOST:PORT"),
])
def test_unusable_settings_are_refused(ingress, url, bind, message) -> None:
    with pytest.raises(ValueError, match=message):
        remote_endpoint(ingress, url, bind)


def test_info_says_which_backends_need_it() -> None:
    assert not needs_proxy_url("local")
    assert all(needs_proxy_url(b) for b in ("docker", "modal", "e2b", "daytona"))
