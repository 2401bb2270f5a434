"""The helpers that make a negative test prove it reached its code (tests/fixtures/
reached.py): each passes when the path was taken and fails, naming it, when not."""

from __future__ import annotations

import asyncio
import logging
import types

import httpx
import pytest

from tests.fixtures.reached import calls_of, logged, refusal


class Guard:
    def check(self, value: int) -> int:
        return value * 2

    async def acheck(self, value: int) -> int:
        return value * 3

    @staticmethod
    def static(value: int) -> int:
        return value + 1


def test_calls_of_counts_and_passes_each_call_through() -> None:
    guard = Guard()
    with calls_of(Guard, "check", at_least=2) as calls:
        assert guard.check(2) == 4 and guard.check(5) == 10
    assert calls.count == 2 and calls.seen[1][0] == (guard, 5)
    assert Guard.check is vars(Guard)["check"] and guard.check(1) == 2  # put back


def test_calls_of_passes_through_async_static_and_module_functions() -> None:
    module = types.SimpleNamespace(double=lambda value: value * 2)
    with (
        calls_of(Guard, "acheck") as awaited,
        calls_of(Guard, "static") as static,
        calls_of(module, "double") as plain,
    ):
        assert asyncio.run(Guard().acheck(2)) == 6
        assert Guard.static(1) == 2 and Guard().static(1) == 2
        assert module.double(4) == 8
    assert (awaited.count, static.count, plain.count) == (1, 2, 1)
    assert isinstance(vars(Guard)["static"], staticmethod)


def test_calls_of_fails_naming_the_path_when_it_was_not_reached() -> None:
    with (
        pytest.raises(AssertionError, match=r"not reached: Guard\.check was called 0"),
        calls_of(Guard, "check"),
    ):
        pass
    assert "check" in vars(Guard)  # restored even so
    with (
        pytest.raises(AssertionError, match="called 1 times, expected at least 2"),
        calls_of(Guard, "check", at_least=2),
    ):
        Guard().check(1)


def test_calls_of_on_an_instance_leaves_its_class_alone() -> None:
    guard = Guard()
    with calls_of(guard, "check") as calls:
        guard.check(1)
        Guard().check(1)  # another instance: not counted
    assert calls.count == 1 and "check" not in vars(guard)


def test_logged_passes_on_the_words_and_fails_listing_what_was_said() -> None:
    log = logging.getLogger("tests.reached.demo")
    with logged("tests.reached.demo", "refused: too deep") as seen:
        log.debug("refused: too deep at 300 levels")
    assert seen.messages() == ["refused: too deep at 300 levels"]
    assert log.level == logging.NOTSET and not log.handlers  # put back
    with (
        pytest.raises(AssertionError, match=r"never said 'too deep'.*\['something else'\]"),
        logged("tests.reached.demo", "too deep"),
    ):
        log.warning("something else")
    with (
        pytest.raises(AssertionError, match="never said"),
        logged("tests.reached.demo", "too deep", level=logging.ERROR),
    ):
        log.warning("too deep, but only a warning")


def test_refusal_asks_for_the_status_and_the_words_naming_the_reason() -> None:
    reply = httpx.Response(400, json={"error": "max: not a whole number", "field": "max"})
    assert "whole number" in refusal(reply, 400, '"field":"max"', "whole number")
    with pytest.raises(AssertionError, match="expected a 400, got 421"):
        refusal(httpx.Response(421, text="misdirected"), 400)
    with pytest.raises(AssertionError, match=r"not the refusal under test.*\['seed'\]"):
        refusal(httpx.Response(400, text="bad host"), 400, "seed")


def test_refusal_reads_an_asgi_reply_too() -> None:
    asgi = types.SimpleNamespace(status=405, body=b'{"error": "method PUT"}')
    assert refusal(asgi, 405, "PUT") == '{"error": "method PUT"}'
