"""An SGLang server seen through the engine shapes the rest of the proxy speaks (vLLM's).

SGLang's `/v1/chat/completions` (python/sglang/srt/entrypoints/openai/protocol.py and
serving_chat.py, v0.5 line) does not put the ids where vLLM does:

- the prompt's ids come back on the choice (`choices[0].prompt_token_ids`) when the
  request sets `return_prompt_token_ids: true`;
- the sampled ids and their logprobs come back in `choices[0].meta_info`
  (`output_token_logprobs`: one `[logprob, token_id, text]` triple per sampled token)
  when the request sets `return_meta_info: true` and `logprobs: true`. Releases name the
  plain id list differently (`token_ids`, `response_token_ids`) or not at all; the
  triples are in every one, and pair each id with its own logprob.

So a capture request (one that sets vLLM's `return_token_ids`) is sent with SGLang's
fields too, and the reply is reshaped: `prompt_token_ids` at the top level,
`choices[0].token_ids` from the triples, `meta_info` dropped. Everything else passes
through. SGLang parses tool calls only when started with `--tool-call-parser`; without
it the tools still reach the prompt and every call comes back as text, so a call that
offers tools is refused here (as vLLM refuses one without its flags) rather than
recorded as a turn whose tool calls no agent can see.

What SGLang cannot do here: stitched prompts. It takes a prompt as ids (`input_ids` on
chat completions), but its `/v1/tokenize` renders messages as a chat completion would
(its TokenizeRequest has no `add_generation_prompt`), and the stitcher needs the
history rendered without the generation prompt; so continuation is off on SGLang
(engine_adapter.py).
"""

from __future__ import annotations

from typing import Any

from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import EngineError

# SGLang's request fields for the capture data (protocol.py, ChatCompletionRequest).
_CAPTURE_FIELDS = {"return_prompt_token_ids": True, "return_meta_info": True, "logprobs": True}
_OLD_SGLANG = (
    "needs an SGLang whose /v1/chat/completions honours `return_prompt_token_ids` and "
    "`return_meta_info` (SGLang v0.5 line) with logprobs on"
)
TOOL_PARSER_FIX = (
    "start SGLang with --tool-call-parser <parser> (e.g. qwen25); agents "
    "that use the text protocol (terminus-2) work without"
)


class SglangEngine:
    """`Engine` over an SGLang server: vLLM-shaped requests in, vLLM-shaped replies out."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # The server's --tool-call-parser, asked once: (name or None,) when known.
        self._tool_call_parser: tuple[str | None] | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        if path == "/v1/chat/completions" and body is not None:
            return await self._chat(body, session)
        if path == "/version":
            # SGLang reports its version in /get_server_info; it has no /version.
            info = await self.engine.request("GET", "/get_server_info")
            return {"version": info.get("version")}
        if path == "/tokenize":
            raise EngineError(
                "SGLang renders no chat messages for /tokenize the way the "
                "proxy needs (with and without the generation prompt)",
                status=400,
            )
        return await self.engine.request(method, path, body, session=session)

    async def _chat(self, body: dict[str, Any], session: str | None) -> dict[str, Any]:
        if (
            body.get("tools")
            and body.get("tool_choice", "auto") != "none"
            and (await self._parser() is None)
        ):
            raise EngineError(
                f"SGLang was started without --tool-call-parser, so tool "
                f"calls would come back as text: {TOOL_PARSER_FIX}",
                status=400,
            )
        if body.get("return_token_ids") is not True:
            return await self.engine.request("POST", "/v1/chat/completions", body, session=session)
        reply = await self.engine.request(
            "POST", "/v1/chat/completions", {**body, **_CAPTURE_FIELDS}, session=session
        )
        return vllm_shaped(reply)

    async def _parser(self) -> str | None:
        if self._tool_call_parser is None:
            info = await self.engine.request("GET", "/get_server_info")
            parser = info.get("tool_call_parser")
            self._tool_call_parser = (parser if isinstance(parser, str) and parser else None,)
        return self._tool_call_parser[0]


def vllm_shaped(reply: dict[str, Any]) -> dict[str, Any]:
    """SGLang's reply to a capture request with its ids where vLLM puts them; an
    EngineError (502) naming the fix when they did not come back."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return reply  # no choice to reshape: the reply's parser reports it
    choice = choices[0]
    meta = choice.get("meta_info")
    triples = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    prompt_ids = choice.get("prompt_token_ids")
    if not isinstance(prompt_ids, list) or not isinstance(triples, list):
        raise EngineError(
            f"SGLang answered without choices[0].prompt_token_ids or "
            f"choices[0].meta_info.output_token_logprobs: {_OLD_SGLANG}",
            status=502,
        )
    try:
        token_ids = [triple[1] for triple in triples]
    except (TypeError, IndexError, KeyError) as exc:
        raise EngineError(
            "SGLang's meta_info.output_token_logprobs are not [logprob, token_id, text] triples",
            status=502,
        ) from exc
    reshaped = {
        k: v
        for k, v in choice.items()
        if k not in ("meta_info", "prompt_token_ids", "response_token_ids")
    }
    reshaped["token_ids"] = token_ids
    return {**reply, "prompt_token_ids": prompt_ids, "choices": [reshaped, *choices[1:]]}
