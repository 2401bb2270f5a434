"""An agent in a "remote" sandbox: a process in a network namespace with no Ray and no
host, reaching the capture proxy only through the configured address.

`python -m tests.cluster.remote_agent URL KEY MODEL CALLS HOST_ADDRESS` prints one JSON
line: the answers, the status of a call with a wrong key, and what a connection to
HOST_ADDRESS (HOST:PORT: the host's own port, on its node's address, which this
namespace routes to) got: `refused` is what must happen, since the host listens on its
loopback only; `accepted` means it listens where sandboxes reach it, and anything else
(a timeout, no route) that the probe proved nothing."""

from __future__ import annotations

import json
import socket
import sys

import httpx


def probe(address: str, timeout_s: float = 10) -> str:
    """`refused`, `accepted`, or the error a TCP connection to HOST:PORT ended in."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return "accepted"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def main() -> None:
    url, key, model, calls, host_address = sys.argv[1:6]
    messages = [{"role": "user", "content": "begin"}]
    answers = []
    with httpx.Client(timeout=60) as http:
        for step in range(int(calls)):
            reply = http.post(
                f"{url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": model, "messages": messages, "max_tokens": 16},
            )
            reply.raise_for_status()
            answer = reply.json()["choices"][0]["message"]["content"]
            answers.append(answer)
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"step {step} done"},
            ]
        wrong_key = http.post(
            f"{url}/v1/chat/completions",
            headers={"authorization": "Bearer not-a-key"},
            json={"model": model, "messages": messages},
        ).status_code
    print(
        json.dumps({"answers": answers, "wrong_key": wrong_key, "host_probe": probe(host_address)})
    )


if __name__ == "__main__":
    main()
