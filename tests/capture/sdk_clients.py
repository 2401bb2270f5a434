"""The official SDKs' clients for a server at a URL (the capture proxy), and one model
call in each dialect through its SDK."""

from __future__ import annotations

from typing import Protocol

import anthropic
import openai
from google import genai
from google.genai import types as gtypes


class Served(Protocol):
    """Anything served at a base URL."""

    url: str


def openai_client(server: Served, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def anthropic_client(server: Served, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


def google_client(server: Served, key: str) -> genai.Client:
    return genai.Client(
        api_key=key,
        http_options=gtypes.HttpOptions(base_url=server.url, retry_options=None),
    )


def reply_text(server: Served, key: str, dialect: str, stream: bool) -> str:
    """The text one model call in `dialect` gets back, through that dialect's SDK."""
    msgs = [{"role": "user", "content": "x"}]
    if dialect == "chat":
        chat = openai_client(server, key).chat.completions
        if stream:
            chunks = list(chat.create(model="m", messages=msgs, stream=True))
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return chat.create(model="m", messages=msgs).choices[0].message.content
    if dialect == "responses":
        responses = openai_client(server, key).responses
        if stream:
            with responses.stream(model="m", input="x") as events:
                return events.get_final_response().output_text
        return responses.create(model="m", input="x").output_text
    if dialect == "anthropic":
        messages = anthropic_client(server, key).messages
        if stream:
            with messages.stream(model="m", max_tokens=5, messages=msgs) as events:
                return events.get_final_message().content[0].text
        return messages.create(model="m", max_tokens=5, messages=msgs).content[0].text
    client = google_client(server, key)  # kept: a dropped client closes its connections
    if stream:
        return "".join(
            c.text or "" for c in client.models.generate_content_stream(model="m", contents="x")
        )
    return client.models.generate_content(model="m", contents="x").text
