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
