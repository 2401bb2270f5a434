"""An agent in a "remote" sandbox: a process in a network namespace with no Ray and no
host, reaching the capture proxy only through the configured address.

`python -m tests.cluster.remote_agent URL KEY MODEL CALLS HOST_URL` prints one JSON line:
the answers, the status of a call with a wrong key, and whether the host's own
(loopback) URL was reachable from here."""

from __future__ import annotations

import json
import sys

import httpx


def main() -> None:
    url, key, model, calls, host_url = sys.argv[1:6]
    messages = [{"role": "user", "content": "begin"}]
    answers = []
    with httpx.Client(timeout=60) as http:
        for step in range(int(calls)):
            reply = http.post(f"{url}/v1/chat/completions",
                              headers={"authorization": f"Bearer {key}"},
                              json={"model": model, "messages": messages, "max_tokens": 16})
            reply.raise_for_status()
            answer = reply.json()["choices"][0]["message"]["content"]
            answers.append(answer)
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": f"step {step} done"}]
        wrong_key = http.post(f"{url}/v1/chat/completions",
                              headers={"authorization": "Bearer not-a-key"},
                              json={"model": model, "messages": messages}).status_code
        try:
            http.get(f"{host_url}/health", timeout=2)
            host_reachable = True
        except httpx.TransportError:
            host_reachable = False
    print(json.dumps({"answers": answers, "wrong_key": wrong_key,
                      "host_reachable": host_reachable}))


if __name__ == "__main__":
    main()
