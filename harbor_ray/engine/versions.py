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

On an engine with LoRA slots (`EngineConfig.lora`) an update loads an adapter instead
(`load_adapter`, then `use_adapter` once every replica has it: `WeightUpdater`), and a
call naming the base model is served by the current adapter: its `model` is rewritten
to the adapter's name before vLLM resolves it, and its tokens are labelled with that
adapter's version (vLLM binds a request to one adapter, so one label holds for all its
tokens; the engine-wide label is never set). An adapter that is not current and that
no call uses is removed (`harbor_ray.engine.adapters.AdapterBook`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any
from uuid import uuid4

from harbor_ray.engine.adapters import AdapterBook
from harbor_ray.engine.tokenize import TokenizingServer
from harbor_ray.errors import WeightsRefusedError

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
        self._adapters = AdapterBook(self._llm_config.model_id)
        self._removing: set[asyncio.Task[None]] = set()
        client: Any = self.engine._engine_client  # type: ignore[union-attr]
        client.generate = _recording(client.generate, self._spans, self._adapter_version)

    def _adapter_version(self, lora_request: Any) -> str | None:
        return None if lora_request is None else self._adapters.version_of(lora_request.lora_name)

    async def weights_kind(self) -> dict[str, Any]:
        """What updates this engine takes (the updater's `KIND_METHOD`): `lora` true
        with `max_rank` when it has LoRA slots (then adapters only), else full weights."""
        config = self.engine._engine_client.vllm_config.lora_config  # type: ignore[union-attr]
        return {
            "lora": config is not None,
            "max_rank": None if config is None else config.max_lora_rank,
        }

    async def load_adapter(self, path: str, version: str, tag: str) -> str:
        """Load the adapter in directory `path` for `version` under a fresh name (from
        `tag`) and a fresh lora_int_id; calls keep their adapter until `use_adapter`."""
        from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

        name = self._adapters.loaded(tag, version)
        answer = await self._models().load_lora_adapter(
            LoadLoRAAdapterRequest(lora_name=name, lora_path=path)
        )
        if not isinstance(answer, str):  # vLLM's ErrorResponse
            self._adapters.removed(name)
            raise WeightsRefusedError(
                f"the engine could not load adapter {path}: {answer.error.message}"
            )
        return name

    async def use_adapter(self, tag: str | None) -> None:
        """Serve new calls with the adapter loaded as `tag` (None: the base model), with
        a fresh prefix-cache salt; remove the adapters no call uses any more."""
        removable = self._adapters.switch(tag)
        self._cache_salt = _fresh_salt(tag or "base")
        await self._remove(removable)

    async def drop_adapter(self, tag: str) -> None:
        """Remove the adapter loaded as `tag` unless it serves (an update that failed on
        another replica); nothing if it was never loaded."""
        name = self._adapters.drop(tag)
        await self._remove([] if name is None else [name])

    def _models(self) -> Any:
        models = getattr(self.engine, "_oai_models", None)
        if models is None:
            raise WeightsRefusedError("this engine has no model registry to load adapters into")
        return models

    async def _remove(self, names: list[str]) -> None:
        from vllm.entrypoints.serve.lora.protocol import UnloadLoRAAdapterRequest

        models = self._models()
        for name in names:
            self._adapters.removed(name)
            lora = models.lora_requests.get(name)
            if lora is None:
                continue
            await models.unload_lora_adapter(UnloadLoRAAdapterRequest(lora_name=name))
            # vLLM's unload only forgets the name: the engine keeps the weights in its
            # slot until told.
            await self.engine._engine_client.remove_lora(lora.lora_int_id)  # type: ignore[union-attr]

    def _ended(self, name: str) -> None:
        """A call that used adapter `name` ended: remove what is stale, in the background
        (a reply's generator may be closed where it cannot wait)."""
        removable = self._adapters.end(name)
        if removable:
            task = asyncio.get_running_loop().create_task(self._remove(removable))
            self._removing.add(task)
            task.add_done_callback(self._removing.discard)

    async def set_weight_version(self, version: str) -> None:
        """Label the weights loaded from now on (the updater's `LABEL_METHOD`, called
        while the engine is paused)."""
        await self.engine._engine_client.update_weight_version(version)  # type: ignore[union-attr]
        self._cache_salt = _fresh_salt(version)

    async def chat(self, request: Any, raw_request_info: Any = None) -> Any:
        self._salt(request)
        adapter = self._adapters.begin(request.model)
        if adapter is not None:
            request.model = adapter
        try:
            replies = await super().chat(request, raw_request_info)
        except BaseException:
            if adapter is not None:
                self._ended(adapter)
            raise
        return self._with_spans(replies, adapter)

    async def completions(self, request: Any, raw_request_info: Any = None) -> Any:
        # Salted too; its spans are not returned (the capture proxy sends chats only).
        self._salt(request)
        adapter = self._adapters.begin(request.model)
        if adapter is None:
            return await super().completions(request, raw_request_info)
        request.model = adapter
        try:
            replies = await super().completions(request, raw_request_info)
        except BaseException:
            self._ended(adapter)
            raise
        return self._in_use(replies, adapter)

    async def _in_use(
        self, replies: AsyncGenerator[Any, None], adapter: str
    ) -> AsyncGenerator[Any, None]:
        try:
            async for reply in replies:
                yield reply
        finally:
            self._ended(adapter)

    def _salt(self, request: Any) -> None:
        if getattr(request, "cache_salt", None) is None:
            request.cache_salt = self._cache_salt

    async def _with_spans(
        self, replies: AsyncGenerator[Any, None], adapter: str | None
    ) -> AsyncGenerator[Any, None]:
        try:
            async for reply in replies:
                spans = self._spans.pop(getattr(reply, "id", None) or "", None)
                if spans is not None:
                    for choice in reply.choices:
                        if choice.index < len(spans) and spans[choice.index] is not None:
                            choice.weight_versions = spans[choice.index]
                if adapter is not None and hasattr(reply, "model"):
                    # The client asked for the base name; the version is in the spans.
                    reply.model = self._adapters.model_id
                yield reply
        finally:
            if adapter is not None:
                self._ended(adapter)


def _fresh_salt(version: str) -> str:
    return f"weights-{version}-{uuid4().hex[:12]}"


def _recording(
    generate: Callable[..., AsyncGenerator[Any, None]],
    spans: dict[str, list[list[dict[str, Any]] | None]],
    adapter_version: Callable[[Any], str | None],
) -> Callable[..., AsyncGenerator[Any, None]]:
    """`generate` that keeps each finished request's spans under its request id; a
    request served by an adapter of a weight update has its spans labelled with that
    adapter's version (`adapter_version` of its `lora_request`)."""

    async def generate_recording(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        version = adapter_version(kwargs.get("lora_request"))
        async for output in generate(*args, **kwargs):
            if output.finished:
                while len(spans) >= _SPANS_KEPT:
                    del spans[next(iter(spans))]
                spans[output.request_id] = [
                    None
                    if c.weight_versions is None
                    else [
                        {"version": version or s.version, "start": s.start, "end": s.end}
                        for s in c.weight_versions
                    ]
                    for c in output.outputs
                ]
            yield output

    return generate_recording
