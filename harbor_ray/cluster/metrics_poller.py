"""The edge of the adaptive cap: read the engines' `/metrics` every few seconds, let the
admission controller decide, move the gate.

A replica that does not answer is left out of that sample; a sample with no replica
answering holds the limit (no news is not a reason to move it). The loop runs until it
is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import httpx

from harbor_ray.cluster.admission import AdmissionController
from harbor_ray.cluster.engine_metrics import EngineLoad, parse_engine_metrics
from harbor_ray.cluster.gate import ResizableGate

log = logging.getLogger(__name__)


async def read_engine_load(client: httpx.AsyncClient, urls: Sequence[str]) -> EngineLoad | None:
    """The engines' load from every URL that answers; None if none does."""
    replies = await asyncio.gather(*(client.get(url) for url in urls), return_exceptions=True)
    texts = []
    for url, reply in zip(urls, replies, strict=True):
        if isinstance(reply, httpx.Response) and reply.status_code == 200:
            texts.append(reply.text)
        else:
            log.debug("engine metrics at %s unread: %r", url, reply)
    return parse_engine_metrics(texts) if texts else None


async def steer_gate(
    gate: ResizableGate,
    controller: AdmissionController,
    urls: Sequence[str],
    *,
    every_s: float,
    on_limit: Callable[[int], None] = lambda _: None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> None:
    """Every `every_s` seconds: sample the engines at `urls`, resize `gate` to the
    controller's limit and tell `on_limit`. `transport` replaces the network (tests)."""
    async with httpx.AsyncClient(timeout=max(every_s, 1.0), transport=transport) as client:
        while True:
            await asyncio.sleep(every_s)
            load = await read_engine_load(client, urls)
            if load is not None:
                gate.resize(controller.observe(load, gate.held))
                on_limit(gate.limit)
