import pytest

from harbor_ray.capture.core.detect import CallRoute, detect


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", CallRoute("chat", "generate")),
        ("/V1/Chat/Completions/", CallRoute("chat", "generate")),
        ("/v1/responses", CallRoute("responses", "generate")),
        ("/v1/messages", CallRoute("anthropic", "generate")),
        ("/v1/messages/count_tokens", CallRoute("anthropic", "count_tokens")),
        (
            "/v1beta/models/gemini-2.5:generateContent",
            CallRoute("google", "generate", "gemini-2.5"),
        ),
        ("/v1beta/models/g:streamGenerateContent", CallRoute("google", "generate", "g", True)),
        # docs/lessons.md: capital G; compared case-insensitively, streaming is still detected.
        ("/v1beta/models/g:STREAMGENERATECONTENT", CallRoute("google", "generate", "g", True)),
        ("/models/g:generateContent", CallRoute("google", "generate", "g")),
        ("/v1beta/models/g:countTokens", CallRoute("google", "count_tokens", "g")),
        ("/v1/models", CallRoute("chat", "models")),
    ],
)
def test_paths(path: str, expected: CallRoute) -> None:
    assert detect(path, {}, {}) == expected


def test_google_alt_sse_streams() -> None:
    route = detect("/v1beta/models/g:generateContent", {}, {"alt": "sse"})
    assert route == CallRoute("google", "generate", "g", True)


def test_models_route_follows_anthropic_header() -> None:
    assert detect("/v1/models", {"anthropic-version": "2023-06-01"}, {}).dialect == "anthropic"


def test_unknown_paths_and_google_methods() -> None:
    assert detect("/v1/embeddings", {}, {}) is None
    assert detect("/v1beta/models/g:embedContent", {}, {}) is None


@pytest.mark.parametrize(
    ("headers", "body", "dialect"),
    [
        ({"anthropic-version": "2023-06-01"}, {"messages": []}, "anthropic"),
        ({}, {"contents": []}, "google"),
        ({}, {"input": "x"}, "responses"),
        ({}, {"messages": []}, "chat"),
    ],
)
def test_body_shape_at_the_root(headers: dict, body: dict, dialect: str) -> None:
    route = detect("/", headers, {}, body)
    assert route is not None and route.dialect == dialect


def test_body_shape_not_consulted_when_path_decides() -> None:
    assert detect("/v1/messages", {}, {}, {"contents": []}).dialect == "anthropic"
