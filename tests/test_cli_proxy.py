"""`harbor-ray proxy` as users run it: a real process, a real port, a real engine URL."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.fake_engine import fake_engine_process, free_port, wait_for


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


def test_serves_certified_engine_end_to_end(fake_engine_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(harbor_ray("proxy", "--llm-url", fake_engine_url,
                                       "--port", str(port), "--budget", "3"),
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "ready at" in line:
                break
        assert any("engine certified: fake-model" in line for line in lines), lines
        url = f"http://127.0.0.1:{port}"
        session = httpx.post(f"{url}/sessions").json()
        assert session["budget"] == 3
        reply = httpx.post(f"{url}/v1/chat/completions",
                           headers={"authorization": f"Bearer {session['key']}"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert reply.json()["choices"][0]["message"]["content"] == "echo: hi"
        doc = httpx.get(f"{url}/sessions/{session['session_id']}/export").json()
        assert len(doc["turns"]) == 1 and doc["trainable"]
    finally:
        proc.terminate()
        proc.wait(10)


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
    engine = subprocess.Popen([sys.executable, "-m", "harbor_ray.capture.fake_engine",
                               "--port", str(port), "--no-token-ids"])
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


@pytest.mark.parametrize("command", [
    ["proxy", "--port", "0"],
    ["rollout", "--agent", "terminus-2", "--task", "hello-file"],
])
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
