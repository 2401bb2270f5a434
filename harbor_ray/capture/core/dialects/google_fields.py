"""Google generateContent's request fields read the same wherever they appear: one
level of an object in camelCase (both spellings accepted, both at once refused),
strings, and the tools: function declarations, their Gemini Schemas as the JSON Schema
the engine expects, and `toolConfig` as a tool choice. The dialect itself
(dialects/google.py) reads the messages and writes the replies.
"""

from __future__ import annotations

import re
from typing import Any

from harbor_ray.capture.core.dialects.base import require_dict, require_list
from harbor_ray.errors import AgentRequestError

# Gemini Schema keywords whose values are schemas themselves (the rest pass through).
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_SINGLE = ("items", "not", "additionalProperties")
_SNAKE = re.compile(r"_([a-z0-9])")


def read_camel(value: Any, what: str) -> dict[str, Any]:
    """One level of a Google object with every key in camelCase."""
    out: dict[str, Any] = {}
    for key, item in require_dict(value, what).items():
        name = _SNAKE.sub(lambda m: m.group(1).upper(), key)
        if name in out:
            raise AgentRequestError(f"{what} has the field {name} twice (camelCase and snake_case)")
        out[name] = item
    return out


def read_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise AgentRequestError(f"{what} must be a string")
    return value


def read_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise AgentRequestError(f"{what} must be a non-empty string")
    return value


def read_tools(tools_value: Any, config_value: Any, left_out: list[str]) -> dict[str, Any]:
    functions: list[dict[str, Any]] = []
    for i, raw in enumerate(require_list(tools_value or [], "tools")):
        tool = read_camel(raw, f"tools[{i}]")
        left_out.extend(f"tools[{i}].{key}" for key in tool if key != "functionDeclarations")
        declarations = require_list(
            tool.get("functionDeclarations", []), f"tools[{i}].functionDeclarations"
        )
        for j, declaration in enumerate(declarations):
            functions.append(_function(declaration, f"tools[{i}].functionDeclarations[{j}]"))
    out: dict[str, Any] = {"tools": functions} if functions else {}
    choice = _tool_choice(config_value)
    if choice is not None:
        out["tool_choice"] = choice
    return out


def _function(value: Any, what: str) -> dict[str, Any]:
    declaration = read_camel(value, what)
    function: dict[str, Any] = {"name": read_name(declaration.get("name"), f"{what}.name")}
    if "description" in declaration:
        function["description"] = read_text(declaration["description"], f"{what}.description")
    if "parameters" in declaration and "parametersJsonSchema" in declaration:
        raise AgentRequestError(f"{what} must give parameters or parametersJsonSchema, not both")
    if "parameters" in declaration:
        function["parameters"] = _json_schema(declaration["parameters"], f"{what}.parameters")
    elif "parametersJsonSchema" in declaration:
        # Already JSON Schema: passed on as written.
        function["parameters"] = require_dict(
            declaration["parametersJsonSchema"], f"{what}.parametersJsonSchema"
        )
    return {"type": "function", "function": function}


def _json_schema(value: Any, what: str) -> dict[str, Any]:
    """A Gemini Schema (OBJECT, STRING, nullable) as the JSON Schema the engine expects.

    Only schema positions are converted: property names are the agent's own and kept.
    """
    schema = read_camel(value, what)
    out: dict[str, Any] = {}
    for key, item in schema.items():
        where = f"{what}.{key}"
        if key == "type":
            kind = read_text(item, where).lower()
            if kind != "type_unspecified":
                out["type"] = kind
        elif key in _SCHEMA_MAPS:
            out[key] = {
                name: _json_schema(sub, f"{where}.{name}")
                for name, sub in require_dict(item, where).items()
            }
        elif key in _SCHEMA_LISTS:
            out[key] = [
                _json_schema(sub, f"{where}[{k}]")
                for k, sub in enumerate(require_list(item, where))
            ]
        elif key in _SCHEMA_SINGLE and isinstance(item, dict):
            out[key] = _json_schema(item, where)
        elif key != "nullable":
            out[key] = item
    nullable = schema.get("nullable", False)
    if not isinstance(nullable, bool):
        raise AgentRequestError(f"{what}.nullable must be a boolean")
    if nullable and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _tool_choice(value: Any) -> str | dict[str, Any] | None:
    if value is None:
        return None
    config = read_camel(value, "toolConfig")
    if config.get("functionCallingConfig") is None:
        return None
    what = "toolConfig.functionCallingConfig"
    calling = read_camel(config["functionCallingConfig"], what)
    mode = read_text(calling.get("mode", "MODE_UNSPECIFIED"), f"{what}.mode").upper()
    names = require_list(calling.get("allowedFunctionNames", []), f"{what}.allowedFunctionNames")
    for k, name in enumerate(names):
        read_text(name, f"{what}.allowedFunctionNames[{k}]")
    if mode == "MODE_UNSPECIFIED":
        return None
    # VALIDATED is AUTO with constrained decoding of the calls, which the engine decides.
    if mode in ("AUTO", "VALIDATED"):
        return "auto"
    if mode == "NONE":
        return "none"
    if mode == "ANY":
        # OpenAI can force one named function; several allowed names can only be
        # "some function", so the restriction to them is not passed on.
        if len(names) == 1:
            return {"type": "function", "function": {"name": names[0]}}
        return "required"
    raise AgentRequestError(f"{what}.mode must be AUTO, ANY, NONE or VALIDATED")
