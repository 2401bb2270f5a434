"""A fake engine that answers exactly like vLLM's chat-completions, for fast tests.

It renders the conversation with a ChatML-style template and a byte-level tokenizer
(two special tokens, then one id per UTF-8 byte), so token ids behave like a real
engine's: the next turn's prompt starts with this turn's prompt + sampled ids whenever
the agent sends the reply back unchanged. Replies come from a script (a function of
the messages), so tests can play any conversation, including tool calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.upstream import SESSION_HEADER, engine_status_error
from harbor_ray.errors import EngineError

IM_START, IM_END = 1, 2
_BYTE_OFFSET = 3
VOCAB_SIZE = 256 + _BYTE_OFFSET


@dataclass(frozen=True)
class FakeReply:
    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()  # (name, arguments)
    reasoning: str | None = None


Script = Callable[[list[dict[str, Any]]], FakeReply]
# A script that also reads the tools the request declares (chat function tools).
ToolScript = Callable[[list[dict[str, Any]], list[dict[str, Any]]], FakeReply]


def echo_script(messages: list[dict[str, Any]]) -> FakeReply:
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    return FakeReply(text=f"echo: {_text(last.get('content')) if last else ''}")


def encode(text: str) -> list[int]:
    return [b + _BYTE_OFFSET for b in text.encode()]


def render_prompt(
    messages: list[dict[str, Any]], tools: list[Any] | None = None, *, generation: bool = True
) -> list[int]:
    """The prompt ids of a conversation; `tools`, when given, lead it as a template's do;
    without `generation`, no assistant header closes it."""
    ids: list[int] = []
    if tools:
        ids += [IM_START, *encode(f"tools\n{json.dumps(tools)}"), IM_END, *encode("\n")]
    for message in messages:
        ids += [IM_START, *encode(f"{message.get('role')}\n{_render_content(message)}"), IM_END]
        ids += encode("\n")
    return [*ids, IM_START, *encode("assistant\n")] if generation else ids


def _render_content(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        text += f"<tool_call>{fn.get('name')} {fn.get('arguments')}</tool_call>"
    return text


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def fake_logprob(position: int, temperature: float | None = None) -> float:
    """The logprob of the id sampled at `position`, as vLLM's `processed_logprobs` moves
    it with the temperature (0 and None: unscaled)."""
    return -0.05 * (position % 7 + 1) / (temperature or 1.0)


def _candidates(position: int, temperature: float | None, count: int) -> list[dict[str, Any]]:
    """`top_logprobs` entries: the sampled id's, then runners-up further down."""
    return [
        {
            "token": f"c{rank}",
            "logprob": fake_logprob(position, temperature) - 4 * rank,
            "bytes": None,
        }
        for rank in range(count)
    ]


@dataclass
class FakeEngine:
    """In-process engine: implements `Engine.request` without a socket."""

    script: Script = echo_script
    # When set, plays instead of `script`, with the request's declared tools.
    tool_script: ToolScript | None = None
    model: str = "fake-model"
    delay_s: float = 0.0
    token_ids: bool = True  # False imitates an engine without return_token_ids support
    logprobs: bool = True  # False imitates an engine that ignores `logprobs: true`
    # True imitates a hosted OpenAI-compatible API: it refuses a request argument it does
    # not know (400 "Unrecognized request argument supplied"), as OpenAI's does.
    refuses_unknown_fields: bool = False
    tool_calling: bool = True  # False imitates vLLM without --enable-auto-tool-choice
    renders_tools: bool = True  # False imitates a chat template that ignores `tools`
    fail_with: int | None = None  # answer every generation with this HTTP status
    tokenize: bool = True  # False imitates an engine without vLLM's /tokenize
    # "processed": logprobs move with the temperature (vLLM processed_logprobs); "raw":
    # they do not (vLLM's default, raw_logprobs).
    logprobs_mode: str = "processed"
    calls: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[str | None] = field(default_factory=list)  # each generation's session
    cancelled: int = 0  # generations abandoned mid-way (the client went away)

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        if path == "/version":
            return {"version": "fake"}
        if path == "/tokenize" and self.tokenize and body is not None:
            # vLLM's reply for chat messages: the prompt the next generation would see.
            tokens = render_prompt(
                body.get("messages") or [],
                self._tools(body),
                generation=body.get("add_generation_prompt", True),
            )
            return {"count": len(tokens), "max_model_len": 8192, "tokens": tokens}
        if path != "/v1/chat/completions" or body is None:
            raise EngineError(f"fake engine has no route {method} {path}", status=400)
        self.sessions.append(session)
        return await self.complete(body)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(body)
        if self.delay_s:
            try:
                await asyncio.sleep(self.delay_s)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.fail_with is not None:
            raise engine_status_error(self.fail_with, "fake engine failure")
        if self.refuses_unknown_fields and "return_token_ids" in body:
            raise engine_status_error(
                400, "Unrecognized request argument supplied: return_token_ids"
            )
        if body.get("tools") == []:
            raise engine_status_error(400, "[] is too short - 'tools'")  # what vLLM says
        if body.get("tool_choice") == "auto" and not self.tool_calling:
            raise engine_status_error(
                400,
                '"auto" tool choice requires '
                "--enable-auto-tool-choice and --tool-call-parser to be set",
            )
        messages = body.get("messages") or []
        reply = (
            self.script(messages)
            if self.tool_script is None
            else self.tool_script(messages, body.get("tools") or [])
        )
        prompt = _reused_prompt(body) or render_prompt(messages, self._tools(body))
        sampled_text = reply.text + "".join(
            f"<tool_call>{name} {json.dumps(args)}</tool_call>" for name, args in reply.tool_calls
        )
        sampled = [*encode(sampled_text), IM_END]
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        finish = "tool_calls" if reply.tool_calls else "stop"
        if isinstance(limit, int) and len(sampled) > limit:
            sampled, finish = sampled[:limit], "length"
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"chatcmpl-tool-{len(self.calls)}-{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if body.get("logprobs") and self.logprobs:
            temperature = body.get("temperature") if self.logprobs_mode == "processed" else None
            top = body.get("top_logprobs") or 0
            choice["logprobs"] = {
                "content": [
                    {
                        "token": str(t),
                        "logprob": fake_logprob(i, temperature),
                        "bytes": None,
                        "top_logprobs": _candidates(i, temperature, top),
                    }
                    for i, t in enumerate(sampled)
                ]
            }
        out: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.calls)}",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(sampled),
                "total_tokens": len(prompt) + len(sampled),
            },
        }
        if self.token_ids and body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = sampled
        return out

    def _tools(self, body: dict[str, Any]) -> list[Any] | None:
        return body.get("tools") if self.renders_tools else None


def _reused_prompt(body: dict[str, Any]) -> list[int] | None:
    """Forwarded prompt ids, used as vLLM 0.32 uses them: instead of rendering the
    messages, unless the request echoes or has non-text content."""
    forwarded = body.get("kv_transfer_params")
    ids = forwarded.get("prompt_token_ids") if isinstance(forwarded, dict) else None
    if (
        not ids
        or body.get("echo")
        or any(
            isinstance(m.get("content"), list)
            and any(p.get("type", "text") != "text" for p in m["content"])
            for m in body.get("messages") or []
        )
    ):
        return None
    if any(type(i) is not int or not 0 <= i < VOCAB_SIZE for i in ids):
        raise engine_status_error(400, "kv_transfer_params.prompt_token_ids out of vocabulary")
    return list(ids)


def fake_engine_app(engine: FakeEngine) -> Starlette:
    """The fake served over HTTP, for certification tests and benchmarks."""

    async def handle(request: Request) -> Response:
        body = await request.json() if request.method == "POST" else None
        answer = asyncio.ensure_future(
            engine.request(
                request.method, request.url.path, body, session=request.headers.get(SESSION_HEADER)
            )
        )
        gone = asyncio.ensure_future(_disconnected(request))
        # As vLLM does: a generation whose client left is aborted, not run to its end.
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not answer.done():
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
            return Response(status_code=499)
        try:
            return JSONResponse(answer.result())
        except EngineError as exc:
            return JSONResponse({"error": {"message": exc.message}}, status_code=exc.status)

    return Starlette(
        routes=[
            Route("/v1/models", handle, methods=["GET"]),
            Route("/version", handle, methods=["GET"]),
            Route("/v1/chat/completions", handle, methods=["POST"]),
            Route("/tokenize", handle, methods=["POST"]),
        ]
    )


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (its body is read: nothing else can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def main() -> None:
    """`python -m harbor_ray.capture.proxy.fake_engine --port N`: a stand-in engine for smoke
    tests of the proxy and agents where no model can run."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--no-token-ids",
        action="store_true",
        help="imitate an engine that ignores return_token_ids",
    )
    parser.add_argument(
        "--no-logprobs",
        action="store_true",
        help="imitate an engine that ignores `logprobs: true` (with "
        "--no-token-ids: a text-only engine)",
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=0.0,
        help="answer each generation after this long, like a real engine",
    )
    args = parser.parse_args()
    engine = FakeEngine(
        token_ids=not args.no_token_ids, logprobs=not args.no_logprobs, delay_s=args.delay_ms / 1000
    )
    uvicorn.run(fake_engine_app(engine), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
