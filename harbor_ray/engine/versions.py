"""The policy version of every sampled token, and a prefix cache salted by version.

vLLM 0.32 labels its weights (`AsyncLLM.update_weight_version`) and tracks, per
request, which label sampled which output tokens (`CompletionOutput.weight_versions`,
spans `[start, end)`), but only its token-in/token-out server returns them: a chat or
completion reply drops them. `VersionedServer` puts them back on each choice of a
non-streamed chat reply, as `weight_versions: [{"version", "start", "end"}]` (vLLM's own
shape), and the weight updater sets the label while the engine is paused
(`harbor_ray.engine.weights.LABEL_METHOD`), so a request that spans an update says
where the new weights took over. The spans are read where vLLM hands its serving layer
each request's outputs: its engine client's `generate`, wrapped once on this replica's
own client.

A request that names no `cache_salt` gets the salt of the weights now loaded: vLLM salts
the hash of a prompt's first block with it, so a new request never reuses a prefix that
other weights computed, while the kept requests of an update keep their own KV. The salt
is drawn afresh at every load, not made from the version number alone: a number names
weights only within one trainer's count (the online service counts from 0 again on an
engine that lived on; a rollback loads other weights under a number served before). A
caller that sets its own salt chooses for itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any
from uuid import uuid4

from harbor_ray.engine.tokenize import TokenizingServer

_SPANS_KEPT = 10_000  # replies whose spans were never claimed (a streamed request)


class VersionedServer(TokenizingServer):
    """The LLM server whose replies say which weight version sampled which tokens."""

    async def start(self) -> None:
        await super().start()
        # Unlabelled until the first update: the weights it started with are whatever
        # version the updater was made with, which it does not know; vLLM's spans then
        # say "default", and the proxy reads that as the version it forwarded the call at.
        self._cache_salt = _fresh_salt("initial")
        self._spans: dict[str, list[list[dict[str, Any]] | None]] = {}
        client: Any = self.engine._engine_client  # type: ignore[union-attr]
        client.generate = _recording(client.generate, self._spans)

    async def set_weight_version(self, version: str) -> None:
        """Label the weights loaded from now on (the updater's `LABEL_METHOD`, called
        while the engine is paused)."""
        await self.engine._engine_client.update_weight_version(version)  # type: ignore[union-attr]
        self._cache_salt = _fresh_salt(version)

    async def chat(self, request: Any, raw_request_info: Any = None) -> Any:
        self._salt(request)
        return self._with_spans(await super().chat(request, raw_request_info))

    async def completions(self, request: Any, raw_request_info: Any = None) -> Any:
        # Salted too; its spans are not returned (the capture proxy sends chats only).
        self._salt(request)
        return await super().completions(request, raw_request_info)

    def _salt(self, request: Any) -> None:
        if getattr(request, "cache_salt", None) is None:
            request.cache_salt = self._cache_salt

    async def _with_spans(self, replies: AsyncGenerator[Any, None]
                          ) -> AsyncGenerator[Any, None]:
        async for reply in replies:
            spans = self._spans.pop(getattr(reply, "id", None) or "", None)
            if spans is not None:
                for choice in reply.choices:
                    if choice.index < len(spans) and spans[choice.index] is not None:
                        choice.weight_versions = spans[choice.index]
            yield reply


def _fresh_salt(version: str) -> str:
    return f"weights-{version}-{uuid4().hex[:12]}"


def _recording(generate: Callable[..., AsyncGenerator[Any, None]],
               spans: dict[str, list[list[dict[str, Any]] | None]]
               ) -> Callable[..., AsyncGenerator[Any, None]]:
    """`generate` that keeps each finished request's spans under its request id."""

    async def generate_recording(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        async for output in generate(*args, **kwargs):
            if output.finished:
                while len(spans) >= _SPANS_KEPT:
                    del spans[next(iter(spans))]
                spans[output.request_id] = [
                    None if c.weight_versions is None else
                    [{"version": s.version, "start": s.start, "end": s.end}
                     for s in c.weight_versions]
                    for c in output.outputs]
            yield output

    return generate_recording
