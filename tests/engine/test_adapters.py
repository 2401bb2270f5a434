"""One replica's account of LoRA adapters (which serves, which calls use which, which
may go), and the per-token labels of calls an adapter served; the engine's own part
runs in tests/engine/test_lora_engine.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from harbor_ray.engine.adapters import AdapterBook
from harbor_ray.engine.versions import _recording
from harbor_ray.errors import WeightsRefusedError

MODEL = "smollm2"


def test_calls_for_the_base_name_get_the_current_adapter() -> None:
    book = AdapterBook(MODEL)
    assert book.begin(MODEL) is None  # before any update: the base model
    name = book.loaded("v1-a", "1")
    assert name == f"{MODEL}@v1-a" and book.begin(MODEL) is None  # loaded, not yet current
    assert book.switch("v1-a") == []
    assert book.begin(MODEL) == name and book.version_of(name) == "1"
    assert book.begin("other-model") is None


def test_an_adapter_goes_once_no_call_uses_it_and_it_is_not_current() -> None:
    book = AdapterBook(MODEL)
    old = book.loaded("v1-a", "1")
    book.switch("v1-a")
    in_flight = book.begin(MODEL)
    new = book.loaded("v2-b", "2")
    assert book.switch("v2-b") == []  # v1 still has a call
    assert book.begin(MODEL) == new
    assert in_flight == old and book.end(old) == [old]
    book.removed(old)
    assert book.version_of(old) is None and book.end(new) == []  # new is current


def test_a_failed_update_drops_only_what_nothing_uses() -> None:
    book = AdapterBook(MODEL)
    book.loaded("v1-a", "1")
    book.switch("v1-a")
    assert book.drop("v1-a") is None  # current
    assert book.drop("v2-never-loaded") is None
    name = book.loaded("v2-b", "2")
    assert book.drop("v2-b") == name
    with pytest.raises(WeightsRefusedError, match="not loaded"):
        book.switch("v3-c")


async def test_an_adapter_call_labels_every_token_with_its_version() -> None:
    spans: dict[str, Any] = {}
    versions = {"m@v2-b": "2"}

    async def generate(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        # vLLM's own spans say "default": a LoRA engine's label is never set.
        completion = SimpleNamespace(
            weight_versions=[SimpleNamespace(version="default", start=0, end=5)]
        )
        yield SimpleNamespace(finished=True, request_id=kwargs["request_id"], outputs=[completion])

    recording = _recording(generate, spans, lambda lora: lora and versions[lora.lora_name])
    [_ async for _ in recording(request_id="a", lora_request=SimpleNamespace(lora_name="m@v2-b"))]
    [_ async for _ in recording(request_id="b", lora_request=None)]
    assert spans["a"] == [[{"version": "2", "start": 0, "end": 5}]]
    assert spans["b"] == [[{"version": "default", "start": 0, "end": 5}]]
