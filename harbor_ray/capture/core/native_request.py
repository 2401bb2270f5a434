"""The request a hosted upstream gets, in its own wire format (upstream_profile.py).

A request in the dialect the upstream speaks goes as the agent sent it (`passthrough`),
with only what the proxy must decide changed: the model, no streaming (the proxy
synthesises the agent's stream), and the run's imposed sampling. A request in another
dialect was already translated to an OpenAI chat body by its dialect module
(`Dialect.to_engine`); `converted` writes that body in the upstream's format. What the
upstream's format cannot say is refused with a 400 naming it (`AgentRequestError`),
never left out: an evaluation of a model that silently lost a tool choice or a stop
sequence measures something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

from harbor_ray.capture.core.dialects.base import DialectName
from harbor_ray.errors import AgentRequestError

__all__ = ["DEFAULT_MAX_TOKENS", "NativeRequest", "converted", "native_path", "passthrough"]

# Messages requires max_tokens; a chat request may leave it out (the engine's limit).
DEFAULT_MAX_TOKENS = 4096

# Fields of the chat body that are null or their default carry nothing to convert.
_NOT_SET: dict[str, Any] = {"parallel_tool_calls": True}

# The proxy's own, not the model's: streaming (the proxy streams), and the capture
# fields. Harbor's agents ask for logprobs and ids for their own records, but the
# proxy's replies carry none whatever the upstream returns, and what a turn records is
# the capture level's, found from the upstream's replies by certification; so asking a
# hosted API for them would change nothing but its refusal of the call.
_PROXY_FIELDS = frozenset({"model", "stream", "logprobs", "top_logprobs", "return_token_ids"})


@dataclass(frozen=True)
class NativeRequest:
    """One request to the upstream: the path below its API root, and the body."""

    path: str
    body: dict[str, Any]
    as_sent: bool = False  # the agent's own request (`passthrough`), not a conversion


def native_path(dialect: DialectName, model: str) -> str:
    """Where a dialect's (non-streamed) model call is posted."""
    if dialect == "anthropic":
        return "/v1/messages"
    if dialect == "responses":
        return "/v1/responses"
    if dialect == "google":
        # v1: the official SDK's default version (google-genai 3.x).
        return f"/v1/models/{quote(model, safe='')}:generateContent"
    return "/v1/chat/completions"


def passthrough(
    dialect: DialectName, body: dict[str, Any], payload: dict[str, Any]
) -> NativeRequest:
    """The agent's own `body` for an upstream of its dialect; `payload` is the chat body
    the proxy made of it (the model, and the sampling a run imposes, are taken from it)."""
    model = payload["model"]
    native = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    if dialect == "google":
        config = dict(native.get("generationConfig") or {})
        _set(config, "temperature", payload.get("temperature"))
        _set(config, "maxOutputTokens", payload.get("max_tokens"))
        if config:
            native["generationConfig"] = config
        native.pop("model", None)
    else:
        native["model"] = model
        _set(native, "temperature", payload.get("temperature"))
        limit = "max_output_tokens" if dialect == "responses" else "max_tokens"
        _set(native, limit, payload.get("max_tokens"))
    return NativeRequest(native_path(dialect, model), native, as_sent=True)


def converted(dialect: DialectName, payload: dict[str, Any]) -> NativeRequest:
    """The chat `payload` in the upstream's format; AgentRequestError for what it cannot
    carry."""
    model = payload["model"]
    body = {
        k: v
        for k, v in payload.items()
        if v is not None and _NOT_SET.get(k, object()) != v and k not in _PROXY_FIELDS
    }
    if dialect == "anthropic":
        native = _ToAnthropic(body).request(model)
    elif dialect == "google":
        native = _ToGoogle(body).request()
    elif dialect == "responses":
        native = _ToResponses(body).request(model)
    else:
        return NativeRequest(native_path(dialect, model), payload)
    return NativeRequest(native_path(dialect, model), native)


def _set(body: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        body[name] = value


class _Conversion:
    """A chat body taken apart field by field: each one the target uses is `take`n, and
    whatever is left at the end is refused by name."""

    target: str

    def __init__(self, body: dict[str, Any]) -> None:
        self._left = dict(body)

    def take(self, name: str) -> Any:
        return self._left.pop(name, None)

    def refuse(self, what: str, why: str) -> AgentRequestError:
        return AgentRequestError(f"{what} cannot be sent to the {self.target} upstream: {why}")

    def finish(self) -> None:
        if self._left:
            names = ", ".join(sorted(self._left))
            raise self.refuse(
                f"request field(s) {names}", f"the {self.target} API has no equivalent"
            )

    def system_and_rest(
        self, messages: list[dict[str, Any]]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """The leading system (and developer) texts, and the messages after them; a
        system message later on has no place in the target's format."""
        system: list[str] = []
        i = 0
        while i < len(messages) and messages[i].get("role") in ("system", "developer"):
            system.append(self.text(messages[i], f"messages[{i}]"))
            i += 1
        for j, message in enumerate(messages[i:], start=i):
            if message.get("role") in ("system", "developer"):
                raise self.refuse(
                    f"messages[{j}] (a {message['role']} message after the conversation started)",
                    "it takes instructions only first",
                )
        return system, messages[i:]

    def text(self, message: dict[str, Any], where: str) -> str:
        """A message's content as text; content parts other than text are refused."""
        content = message.get("content")
        if content is None or isinstance(content, str):
            return content or ""
        texts = []
        for k, part in enumerate(content):
            if part.get("type") != "text":
                raise self.refuse(
                    f"{where}.content[{k}] (a {part.get('type')!r} part)", "only text is converted"
                )
            texts.append(str(part.get("text") or ""))
        return "\n".join(texts)

    def arguments(self, call: dict[str, Any], where: str) -> dict[str, Any]:
        """A tool call's arguments as the object the target requires."""
        text = (call.get("function") or {}).get("arguments") or "{}"
        try:
            value = json.loads(text) if isinstance(text, str) else text
        except json.JSONDecodeError as exc:
            raise self.refuse(
                f"{where} (arguments that are not JSON)", "its tool calls take a JSON object"
            ) from exc
        if not isinstance(value, dict):
            raise self.refuse(
                f"{where} (arguments that are not a JSON object)",
                "its tool calls take a JSON object",
            )
        return value

    def stops(self) -> list[str] | None:
        stop = self.take("stop")
        return [stop] if isinstance(stop, str) else stop

    def max_tokens(self) -> int | None:
        first = self.take("max_tokens")
        second = self.take("max_completion_tokens")
        limit = first if first is not None else second
        return None if limit is None else int(limit)

    def functions(self) -> list[dict[str, Any]]:
        return [tool["function"] for tool in self.take("tools") or []]

    def choice_name(self, choice: Any) -> str | None:
        """The function a named tool_choice forces, else None."""
        return choice["function"]["name"] if isinstance(choice, dict) else None


class _ToAnthropic(_Conversion):
    target = "anthropic"

    def request(self, model: str) -> dict[str, Any]:
        system, rest = self.system_and_rest(self.take("messages"))
        native: dict[str, Any] = {"model": model, "messages": self.messages(rest)}
        if system:
            native["system"] = "\n".join(system)
        native["max_tokens"] = self.max_tokens() or DEFAULT_MAX_TOKENS
        for name in ("temperature", "top_p", "top_k"):
            _set(native, name, self.take(name))
        _set(native, "stop_sequences", self.stops())
        tools = [
            {
                "name": f["name"],
                "description": f.get("description") or "",
                "input_schema": f.get("parameters") or {"type": "object"},
            }
            for f in self.functions()
        ]
        if tools:
            native["tools"] = tools
        choice = self.tool_choice(self.take("tool_choice"), self.take("parallel_tool_calls"))
        _set(native, "tool_choice", choice)
        self.finish()
        return native

    def tool_choice(self, choice: Any, parallel: bool | None) -> dict[str, Any] | None:
        name = self.choice_name(choice)
        out: dict[str, Any] | None
        if name is not None:
            out = {"type": "tool", "name": name}
        else:
            out = {
                "auto": {"type": "auto"},
                "required": {"type": "any"},
                "none": {"type": "none"},
                None: None,
            }[choice]
        if parallel is False:
            out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
        return out

    def messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            where, role = f"messages[{i}]", message.get("role")
            if role == "tool":
                block = {
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id"),
                    "content": self.text(message, where),
                }
                # A user turn's results go together, as the API expects them.
                if out and out[-1]["role"] == "user" and _all_results(out[-1]["content"]):
                    out[-1]["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            elif role == "user":
                out.append(
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": self.text(message, where)}],
                    }
                )
            elif role == "assistant":
                out.append({"role": "assistant", "content": self.assistant(message, where)})
            else:
                raise self.refuse(f"{where} (role {role!r})", "it has no such role")
        return out

    def assistant(self, message: dict[str, Any], where: str) -> list[dict[str, Any]]:
        text = self.text(message, where)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for j, call in enumerate(message.get("tool_calls") or []):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.get("id"),
                    "name": call["function"]["name"],
                    "input": self.arguments(call, f"{where}.tool_calls[{j}]"),
                }
            )
        return blocks


def _all_results(blocks: list[dict[str, Any]]) -> bool:
    return all(block.get("type") == "tool_result" for block in blocks)


class _ToGoogle(_Conversion):
    target = "google"

    _MODES: ClassVar[dict[str, str]] = {"auto": "AUTO", "required": "ANY", "none": "NONE"}

    def request(self) -> dict[str, Any]:
        system, rest = self.system_and_rest(self.take("messages"))
        native: dict[str, Any] = {"contents": self.contents(rest)}
        if system:
            native["systemInstruction"] = {"parts": [{"text": "\n".join(system)}]}
        config: dict[str, Any] = {}
        for name, google in (
            ("temperature", "temperature"),
            ("top_p", "topP"),
            ("top_k", "topK"),
            ("seed", "seed"),
            ("presence_penalty", "presencePenalty"),
            ("frequency_penalty", "frequencyPenalty"),
        ):
            _set(config, google, self.take(name))
        _set(config, "maxOutputTokens", self.max_tokens())
        _set(config, "stopSequences", self.stops())
        if config:
            native["generationConfig"] = config
        declarations = [
            {
                "name": f["name"],
                "description": f.get("description") or "",
                "parameters": f.get("parameters") or {"type": "object"},
            }
            for f in self.functions()
        ]
        if declarations:
            native["tools"] = [{"functionDeclarations": declarations}]
        if self.take("parallel_tool_calls") is False:
            raise self.refuse("parallel_tool_calls false", "it cannot forbid parallel calls")
        choice = self.take("tool_choice")
        if choice is not None:
            forced = self.choice_name(choice)
            calling: dict[str, Any] = {"mode": "ANY" if forced else self._MODES[choice]}
            if forced:
                calling["allowedFunctionNames"] = [forced]
            native["toolConfig"] = {"functionCallingConfig": calling}
        self.finish()
        return native

    def contents(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        names: dict[str, str] = {}  # tool call id -> its function's name
        for i, message in enumerate(messages):
            where, role = f"messages[{i}]", message.get("role")
            if role == "tool":
                call_id = str(message.get("tool_call_id") or "")
                if call_id not in names:
                    raise self.refuse(
                        f"{where} (a tool result for no earlier call)",
                        "a functionResponse must name its function",
                    )
                part = {
                    "functionResponse": {
                        "id": call_id,
                        "name": names[call_id],
                        "response": {"result": self.text(message, where)},
                    }
                }
                if (
                    out
                    and out[-1]["role"] == "user"
                    and all("functionResponse" in p for p in out[-1]["parts"])
                ):
                    out[-1]["parts"].append(part)
                else:
                    out.append({"role": "user", "parts": [part]})
            elif role == "user":
                out.append({"role": "user", "parts": [{"text": self.text(message, where)}]})
            elif role == "assistant":
                text = self.text(message, where)
                parts: list[dict[str, Any]] = [{"text": text}] if text else []
                for j, call in enumerate(message.get("tool_calls") or []):
                    name = call["function"]["name"]
                    names[str(call.get("id"))] = name
                    parts.append(
                        {
                            "functionCall": {
                                "id": call.get("id"),
                                "name": name,
                                "args": self.arguments(call, f"{where}.tool_calls[{j}]"),
                            }
                        }
                    )
                out.append({"role": "model", "parts": parts})
            else:
                raise self.refuse(f"{where} (role {role!r})", "it has no such role")
        return out


class _ToResponses(_Conversion):
    target = "openai-responses"

    def request(self, model: str) -> dict[str, Any]:
        system, rest = self.system_and_rest(self.take("messages"))
        native: dict[str, Any] = {"model": model, "input": self.items(rest), "store": False}
        if system:
            native["instructions"] = "\n".join(system)
        for name in ("temperature", "top_p", "parallel_tool_calls"):
            _set(native, name, self.take(name))
        _set(native, "max_output_tokens", self.max_tokens())
        tools = [
            {
                "type": "function",
                "name": f["name"],
                "description": f.get("description") or "",
                "parameters": f.get("parameters") or {"type": "object"},
                "strict": False,
            }
            for f in self.functions()
        ]
        if tools:
            native["tools"] = tools
        choice = self.take("tool_choice")
        forced = self.choice_name(choice)
        _set(native, "tool_choice", {"type": "function", "name": forced} if forced else choice)
        self.finish()
        return native

    def items(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            where, role = f"messages[{i}]", message.get("role")
            if role == "tool":
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.get("tool_call_id"),
                        "output": self.text(message, where),
                    }
                )
            elif role in ("user", "assistant"):
                text = self.text(message, where)
                if text or role == "user":
                    out.append({"role": role, "content": text})
                out.extend(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": call["function"]["name"],
                        "arguments": call["function"].get("arguments") or "{}",
                    }
                    for call in message.get("tool_calls") or []
                )
            else:
                raise self.refuse(f"{where} (role {role!r})", "it has no such role")
        return out
