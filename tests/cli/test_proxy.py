"""`harbor-ray proxy` as users run it: a real process, a real port, a real engine URL."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.fake_engine import fake_engine_process, free_port, wait_for
from tests.fixtures.sglang_engine import SglangStandIn, sglang_app
from tests.fixtures.threaded import serve_in_thread


@pytest.fixture(scope="module")
def fake_engine_url() -> Iterator[str]:
    with fake_engine_process() as url:
        yield url


def harbor_ray(*args: str) -> list[str]:
    return [sys.executable, "-m", "harbor_ray.cli", *args]


def run_fails(*args: str) -> str:
    done = subprocess.run(harbor_ray(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    return " ".join(done.stderr.split())


@contextlib.contextmanager
def proxy_process(*args: str) -> Iterator[tuple[int, list[str]]]:
    """`harbor-ray proxy ARGS` on a free port; yields (port, its output until ready)."""
    port = free_port()
    proc = subprocess.Popen(
        harbor_ray("proxy", "--port", str(port), *args), stderr=subprocess.PIPE, text=True
    )
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "ready at" in line:
                break
        assert proc.poll() is None, lines
        yield port, lines
    finally:
        proc.terminate()
        proc.wait(10)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def chat(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, json=CHAT
    )


def test_serves_certified_engine_end_to_end(fake_engine_url: str) -> None:
    with proxy_process("--llm-url", fake_engine_url, "--budget", "3") as (port, lines):
        assert any("engine certified: fake-model" in line for line in lines), lines
        url = f"http://127.0.0.1:{port}"
        session = httpx.post(f"{url}/sessions").json()
        assert session["budget"] == 3
        assert chat(url, session["key"]).json()["choices"][0]["message"]["content"] == ("echo: hi")
        doc = httpx.get(f"{url}/sessions/{session['session_id']}/export").json()
        assert len(doc["turns"]) == 1 and doc["trainable"]


def test_fronts_an_sglang_server_found_from_its_answers() -> None:
    """Over HTTP, as users run it: the SGLang adapter is chosen, continuation is off,
    and the turn keeps the ids SGLang returned in its own fields."""
    stand_in = SglangStandIn(return_token_ids=False)
    with (
        serve_in_thread(sglang_app(stand_in)) as engine_url,
        proxy_process("--llm-url", engine_url) as (port, lines),
    ):
        assert any("continuation off: sglang" in line for line in lines), lines
        assert any("engine: sglang" in line for line in lines), lines
        url = f"http://127.0.0.1:{port}"
        session = httpx.post(f"{url}/sessions").json()
        assert chat(url, session["key"]).json()["choices"][0]["message"]["content"] == ("echo: hi")
        doc = httpx.get(f"{url}/sessions/{session['session_id']}/export").json()
    assert len(doc["turns"]) == 1 and doc["trainable"], doc["findings"]
    assert stand_in.calls[-1]["return_prompt_token_ids"] is True
    # The ids the stand-in's own tokenizer made for the call, exactly.
    (turn,) = doc["turns"]
    assert (turn["prompt_ids"], turn["token_ids"]) == (stand_in.prompts[-1], stand_in.outputs[-1])


def test_off_loopback_the_session_routes_need_the_admin_key(fake_engine_url: str) -> None:
    admin = {"authorization": "Bearer the-admin-key"}
    with proxy_process(
        "--llm-url", fake_engine_url, "--host", "0.0.0.0", "--admin-key", "the-admin-key"
    ) as (port, _):
        url = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{url}/sessions").status_code == 401
        assert (
            httpx.post(f"{url}/sessions", headers={"authorization": "Bearer x"}).status_code == 401
        )
        session = httpx.post(f"{url}/sessions", headers=admin).json()
        # Model calls take the session's own key, which opens nothing else.
        assert chat(url, session["key"]).status_code == 200
        export = f"{url}/sessions/{session['session_id']}/export"
        assert (
            httpx.get(export, headers={"authorization": f"Bearer {session['key']}"}).status_code
            == 401
        )
        assert len(httpx.get(export, headers=admin).json()["turns"]) == 1
        assert httpx.get(f"{url}/sessions").status_code == 401
        assert httpx.get(f"{url}/sessions", headers=admin).json() == {
            "sessions": [session["session_id"]]
        }


def test_only_addresses_loopback_and_allowed_names_are_answered(fake_engine_url: str) -> None:
    with proxy_process("--llm-url", fake_engine_url, "--allowed-host", "gateway.internal") as (
        port,
        _,
    ):
        url = f"http://127.0.0.1:{port}"
        key = httpx.post(f"{url}/sessions").json()["key"]
        for host, status in [
            ("evil.example", 421),
            (f"gateway.internal:{port}", 200),
            (f"localhost:{port}", 200),
            (f"10.9.8.7:{port}", 200),
        ]:
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json=CHAT,
                headers={"authorization": f"Bearer {key}", "host": host},
            )
            assert reply.status_code == status, (host, reply.text)


def test_refuses_non_loopback_without_admin_key(fake_engine_url: str) -> None:
    said = run_fails("proxy", "--llm-url", fake_engine_url, "--host", "0.0.0.0")
    assert "--admin-key" in said


def test_refuses_a_port_another_process_owns(fake_engine_url: str) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        said = run_fails("proxy", "--llm-url", fake_engine_url, "--port", str(port))
        assert f"cannot bind 127.0.0.1:{port}" in said
    finally:
        holder.close()


def test_refuses_an_engine_without_token_ids() -> None:
    port = free_port()
    engine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harbor_ray.capture.proxy.fake_engine",
            "--port",
            str(port),
            "--no-token-ids",
        ]
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/models")
        said = run_fails("proxy", "--llm-url", f"http://127.0.0.1:{port}", "--port", "0")
        assert "return_token_ids" in said and "cannot be used for training" in said
    finally:
        engine.terminate()
        engine.wait(10)


def test_llm_url_is_required() -> None:
    done = subprocess.run(harbor_ray("proxy"), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--llm-url" in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["proxy", "--port", "0"],
        ["rollout", "--agent", "terminus-2", "--task", "hello-file"],
    ],
)
def test_engine_timeout_is_a_flag(command: list[str], tmp_path) -> None:
    """An engine slower than --engine-timeout fails certification at once, not after the
    default 600 s: the flag reaches the engine client."""
    with fake_engine_process("--delay-ms", "5000") as slow_url:
        args = [*command, "--llm-url", slow_url, "--engine-timeout", "0.3"]
        if command[0] == "rollout":
            args += ["--out", str(tmp_path)]
        done = subprocess.run(harbor_ray(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "timed out" in done.stderr, done.stderr
