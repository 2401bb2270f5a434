import pytest

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.errors import CertificationError


async def test_certifies_an_engine_that_returns_ids_and_logprobs() -> None:
    cert = await certify(FakeEngine(model="m1"), "http://e")
    assert cert.served_model == "m1" and cert.models == ["m1"]
    assert cert.returns_token_ids and cert.returns_logprobs and cert.tool_calling


async def test_refuses_an_engine_without_token_ids_naming_the_fix() -> None:
    with pytest.raises(CertificationError, match="return_token_ids"):
        await certify(FakeEngine(token_ids=False), "http://e")


async def test_reports_the_tool_calling_flags() -> None:
    cert = await certify(FakeEngine(tool_calling=False), "http://e")
    assert not cert.tool_calling
    assert "--enable-auto-tool-choice" in cert.tool_calling_fix


async def test_reports_a_chat_template_that_ignores_tools() -> None:
    """vLLM accepts tools its template drops: certification must not call that tool calling."""
    cert = await certify(FakeEngine(renders_tools=False), "http://e")
    assert not cert.tool_calling
    assert "chat template ignores `tools`" in cert.tool_calling_fix


async def test_unknown_model_refused() -> None:
    with pytest.raises(CertificationError, match="not served"):
        await certify(FakeEngine(model="a"), "http://e", model="b")


async def test_unreachable_engine_refused() -> None:
    from harbor_ray.capture.proxy.upstream import HttpEngine

    engine = HttpEngine("http://127.0.0.1:9/v1", timeout_s=2)
    try:
        with pytest.raises(CertificationError, match="cannot list models"):
            await certify(engine, engine.root)
    finally:
        await engine.aclose()


@pytest.mark.parametrize("mode", ["processed", "raw"])
async def test_finds_which_logprobs_the_engine_returns(mode: str) -> None:
    """Whether the logprobs move with the sampling temperature (vLLM processed_logprobs)
    or stay the model's at temperature 1 (raw_logprobs): what every turn records."""
    cert = await certify(FakeEngine(logprobs_mode=mode), "http://e")
    assert cert.logprobs_mode == mode


async def test_refuses_an_engine_that_returns_logits() -> None:
    engine = FakeEngine()

    async def logits(body: dict) -> dict:
        reply = await FakeEngine.complete(engine, body)
        for entry in reply["choices"][0].get("logprobs", {}).get("content", []):
            for candidate in entry["top_logprobs"]:
                candidate["logprob"] += 5.0  # a logit, not a log-probability
        return reply

    engine.complete = logits  # type: ignore[method-assign]
    with pytest.raises(CertificationError, match="processed_logprobs"):
        await certify(engine, "http://e")


@pytest.mark.parametrize(
    ("engine", "level"),
    [
        (FakeEngine(), "tokens"),
        (FakeEngine(token_ids=False), "logprobs"),
        (FakeEngine(token_ids=False, logprobs=False), "text"),
        # Ids without logprobs train nothing: that engine is `text` too.
        (FakeEngine(logprobs=False), "text"),
        # A hosted API refuses `return_token_ids` outright; asked again without it.
        (FakeEngine(refuses_unknown_fields=True), "logprobs"),
        (FakeEngine(refuses_unknown_fields=True, logprobs=False), "text"),
    ],
)
async def test_reports_the_capture_level_the_replies_show(engine: FakeEngine, level: str) -> None:
    cert = await certify(engine, "http://e", capture="text")
    assert cert.capture_level == level
    assert cert.returns_token_ids == (level == "tokens")
    assert cert.returns_logprobs == (level != "text")
    assert (cert.logprobs_mode is None) == (level == "text")


async def test_a_text_engine_still_reports_tool_calling_from_its_usage() -> None:
    cert = await certify(FakeEngine(token_ids=False, logprobs=False), "http://e", capture="text")
    assert cert.tool_calling
    cert = await certify(
        FakeEngine(token_ids=False, logprobs=False, renders_tools=False), "http://e", capture="text"
    )
    assert not cert.tool_calling


@pytest.mark.parametrize(
    ("engine", "wanted", "level"),
    [
        (FakeEngine(token_ids=False, logprobs=False), "tokens", "text"),
        (FakeEngine(token_ids=False), "tokens", "logprobs"),
        (FakeEngine(token_ids=False, logprobs=False), "logprobs", "text"),
    ],
)
async def test_refuses_an_engine_below_the_level_asked_naming_the_mode(
    engine: FakeEngine, wanted: str, level: str
) -> None:
    with pytest.raises(CertificationError, match=f"--capture {level}$"):
        await certify(engine, "http://e", capture=wanted)  # type: ignore[arg-type]


async def test_a_tokens_engine_serves_every_level() -> None:
    for wanted in ("tokens", "logprobs", "text"):
        cert = await certify(FakeEngine(), "http://e", capture=wanted)  # type: ignore[arg-type]
        assert cert.capture_level == "tokens"
