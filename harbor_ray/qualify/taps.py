"""What qualification watches besides the capture: the proxy's answers to the agent and
the engine's own ids, so a report can say what the agent got and whether the recorded
ids are the engine's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Message, Receive, Scope, Send

from harbor_ray.capture.proxy.upstream import Engine

_CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Answer:
    """One HTTP answer the proxy gave the agent."""

    method: str
    path: str
    status: int
    streamed: bool  # an SSE stream (text/event-stream)


@dataclass
class ProxyTap:
    """Wraps the capture app; keeps every answer's status and content type (`answers`,
    cleared by the caller between rollouts). Keeps the app's `settings` and `state`."""

    app: Any
    answers: list[Answer] = field(default_factory=list)

    @property
    def settings(self) -> Any:
        return self.app.settings

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def watched(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                headers = dict(message.get("headers") or [])
                streamed = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                self.answers.append(
                    Answer(
                        scope.get("method", "WEBSOCKET"), scope["path"], message["status"], streamed
                    )
                )
            await send(message)

        await self.app(scope, receive, watched)


@dataclass(frozen=True)
class Generation:
    """One chat completion the engine returned: the messages it was asked (JSON, as
    the proxy sent them), its prompt ids and its sampled ids."""

    messages: bytes
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]


@dataclass
class EngineTap:
    """An engine that keeps every generation it returned (`generations`, in the order
    it returned them, cleared by the caller)."""

    engine: Engine
    generations: list[Generation] = field(default_factory=list)

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        reply = await self.engine.request(method, path, body, session=session)
        if path == _CHAT and isinstance(reply, dict):
            choices = reply.get("choices") or [{}]
            self.generations.append(
                Generation(
                    orjson.dumps((body or {}).get("messages")),
                    tuple(reply.get("prompt_token_ids") or ()),
                    tuple(choices[0].get("token_ids") or ()),
                )
            )
        return reply

    async def aclose(self) -> None:
        close = getattr(self.engine, "aclose", None)
        if close is not None:
            await close()
