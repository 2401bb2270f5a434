"""`harbor_ray.playground.launch`: a visitor's engine is certified once, to refuse it
before the run starts, and the run takes that certification."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.form import RunForm
from harbor_ray.playground.launch import Launcher
from harbor_ray.playground.runs import RunBoard
from harbor_ray.playground.visitor_engine import VisitorEngines
from tests.playground.served import FakeRollouts

CERT = Certification(
    url="http://visitor:8000",
    served_model="m",
    models=["m"],
    engine_version=None,
    returns_token_ids=True,
    returns_logprobs=True,
    tool_calling=True,
    tool_calling_fix=None,
    logprobs_mode="processed",
)


async def test_a_visitor_engine_is_certified_once_and_the_run_takes_it(
    catalog: Catalog, tmp_path: Path
) -> None:
    certified: list[str] = []

    async def certify(url: str) -> Certification:
        certified.append(url)
        return CERT

    rollouts = FakeRollouts()
    launcher = Launcher(
        RunBoard(share=False),
        catalog,
        out=tmp_path,
        llm_url=None,
        rollouts=rollouts,
        engines=VisitorEngines(allow_private=True, certify=certify),
    )
    await launcher.start(
        "v",
        RunForm(
            agent="terminus-2",
            dataset="samples",
            task="hello-file",
            engine="visitor",
            llm_url="http://visitor:8000",
        ),
    )
    for _ in range(500):  # the run calls run_rollouts from a thread
        if rollouts.requests:
            break
        await asyncio.sleep(0.01)
    await launcher.aclose()
    assert certified == ["http://visitor:8000"]
    (request,) = rollouts.requests
    assert request.certified == CERT and request.llm_url == "http://visitor:8000"
