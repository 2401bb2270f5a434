"""A hosted API's rate limit (429 with Retry-After) slows the proxy's calls instead of
failing them: the proxy sends the call again after the delay asked, a bounded number of
times, and the turn says how many. Against a stand-in of Anthropic's API
(tests/fixtures/providers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from harbor_ray.capture.proxy.pipeline import MAX_RATE_LIMIT_RETRIES, MAX_RETRY_AFTER_S
from tests.capture.test_hosted import HostedProxy, hosted_proxy
from tests.fixtures.providers import MODEL, StandIn

SECRET = "sk-ant-rate-SECRET-0b7d41"


@pytest.fixture(scope="module")
def hosted() -> Iterator[HostedProxy]:
    with hosted_proxy(StandIn("anthropic", SECRET)) as proxy:
        yield proxy


@pytest.fixture
def stand_in(hosted: HostedProxy) -> Iterator[StandIn]:
    hosted.stand_in.requests.clear()
    yield hosted.stand_in
    hosted.stand_in.rate_limited, hosted.stand_in.retry_after = 0, "0"


def call(hosted: HostedProxy) -> tuple[httpx.Response, dict]:
    """One chat call in a new session, and the session's export after it."""
    session_id, key = hosted.new_session()
    reply = httpx.post(
        f"{hosted.url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {key}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}]},
    )
    return reply, hosted.export(session_id)


def generations(stand_in: StandIn) -> int:
    return sum(
        1 for path, _, body in stand_in.requests if body is not None and path == "/v1/messages"
    )


def test_a_rate_limited_call_is_sent_again_and_counted(
    hosted: HostedProxy, stand_in: StandIn
) -> None:
    stand_in.rate_limited, stand_in.retry_after = 2, "0.05"
    reply, export = call(hosted)
    assert reply.status_code == 200, reply.text
    assert generations(stand_in) == 3  # refused twice, then answered
    (turn,) = export["turns"]
    assert turn["upstream_retries"] == 2
    assert export["counts"]["retried_calls"] == 1
    assert export["counts"]["engine_errors"] == 0
    # Every try carried the key, in the API's own header.
    assert all(
        headers["x-api-key"] == SECRET
        for path, headers, body in stand_in.requests
        if body is not None
    )


def test_retries_are_bounded_then_the_429_reaches_the_agent(
    hosted: HostedProxy, stand_in: StandIn
) -> None:
    stand_in.rate_limited, stand_in.retry_after = MAX_RATE_LIMIT_RETRIES + 1, "0"
    reply, export = call(hosted)
    assert reply.status_code == 429
    assert generations(stand_in) == 1 + MAX_RATE_LIMIT_RETRIES
    assert export["turns"] == [] and export["counts"]["engine_errors"] == 1


@pytest.mark.parametrize(
    "retry_after",
    [None, str(MAX_RETRY_AFTER_S * 2), "soon"],
    ids=["absent", "too-long", "not-seconds"],
)
def test_a_429_without_a_usable_retry_after_is_not_retried(
    hosted: HostedProxy, stand_in: StandIn, retry_after: str | None
) -> None:
    stand_in.rate_limited, stand_in.retry_after = 1, retry_after
    reply, export = call(hosted)
    assert reply.status_code == 429
    assert generations(stand_in) == 1
    assert export["counts"]["retried_calls"] == 0 and export["counts"]["engine_errors"] == 1
