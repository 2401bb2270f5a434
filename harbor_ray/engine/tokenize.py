"""`POST /tokenize` with chat messages on the engine, as vLLM's own server offers it.

The capture proxy stitches a continued conversation's prompt from ids the engine
already produced plus the engine's rendering of what was added
(capture/core/continuation.py), and that rendering must be the served chat template's:
vLLM's `/tokenize` with `messages`. Ray Serve LLM 2.60 in front of vLLM 0.32 loses it
twice: its ingress takes only `{prompt}` bodies, and its vLLM engine looks for the
tokenizer service under a name vLLM 0.32 no longer uses (`openai_serving_tokenization`;
vLLM sets `serving_tokenization`), so every tokenize answers "does not support the
'tokenization' task". These two subclasses put both back; nothing else changes.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from ray.llm._internal.serve.core.configs.openai_api_models import TokenizeRequest
from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress
from ray.llm._internal.serve.core.server.llm_server import LLMServer


class TokenizingIngress(OpenAiIngress):
    """The OpenAI ingress whose /tokenize also takes chat messages."""

    async def tokenize(self, body: TokenizeRequest, request: Request) -> Response:
        # Ray's signature names the `{prompt}` form only; the body passes on to vLLM's
        # tokenize, which takes both forms (the point of this subclass).
        return await super().tokenize(body, request)  # type: ignore[arg-type]


class TokenizingServer(LLMServer):
    """The LLM server, with the engine's tokenizer service found under vLLM's name."""

    async def start(self) -> None:
        await super().start()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
        engine: Any = self.engine
        state = getattr(engine, "_app_state", None)
        if getattr(engine, "_oai_serving_tokenization", True) is None and state is not None:
            engine._oai_serving_tokenization = getattr(state, "serving_tokenization", None)
