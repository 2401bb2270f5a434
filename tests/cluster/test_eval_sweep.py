"""`harbor-ray sweep --capture text --upstream ...`: a hosted model evaluated at dataset
scale, as users run it (its own process and local Ray), against a stand-in of
Anthropic's API that records every request's headers (tests/fixtures/providers.py; no
real provider is called). The key reaches the upstream from the proxies, with either
ingress, and nothing else: not the dataset, the manifest, the logs (Ray's own, replicas'
included), the sandbox's environment or the terminal. A rate limit slows the sweep and
is counted; the rows resume like any sweep's and mean what `harbor-ray rollout`'s do."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cli.test_rollout_capture import rollout
from tests.fixtures.providers import StandIn, provider_app
from tests.fixtures.threaded import serve_in_thread
from tests.trials.scripts import terminus_script

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-sweep-SECRET-4e91d0"
# The agent's one command writes the sandbox's environment where Harbor copies the
# trial's agent logs from (OUT/trials/<rollout>/agent/).
KEYSTROKES = "env > /logs/agent/sandbox-env.txt; echo hello > /app/hello.txt\n"
THROTTLED = 2  # generations the stand-in refuses first (429, Retry-After 0.1)


@dataclass
class Swept:
    ingress: str
    out: Path
    url: str
    key_file: Path
    stand_in: StandIn
    output: str
    code: int

    def sweep(self, *flags: str) -> tuple[int, str]:
        return sweep(self.url, self.out, self.key_file, *flags)


def sweep(url: str, out: Path, key_file: Path, *flags: str) -> tuple[int, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_ray.cli",
            "sweep",
            "--agent",
            "terminus-2",
            "--task",
            "hello-file",
            "-n",
            "2",
            "--llm-url",
            url,
            "--upstream",
            "anthropic",
            "--upstream-key-file",
            str(key_file),
            "--capture",
            "text",
            "--out",
            str(out),
            "--name",
            "eval",
            "--concurrency",
            "2",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode, done.stdout + done.stderr


def generations(stand_in: StandIn) -> list[dict[str, str]]:
    """The headers of every generation the stand-in was sent (probes aside)."""
    return [
        headers
        for path, headers, body in stand_in.requests
        if body is not None and path == "/v1/messages" and "Say OK." not in json.dumps(body)
    ]


def _swept(ingress: str, tmp: Path, stack: contextlib.ExitStack) -> Swept:
    key_file = tmp / "upstream.key"
    key_file.write_text(SECRET + "\n")
    stand_in = StandIn(
        "anthropic",
        SECRET,
        script=terminus_script(KEYSTROKES),
        rate_limited=THROTTLED,
        retry_after="0.1",
    )
    url = stack.enter_context(serve_in_thread(provider_app(stand_in)))
    code, output = sweep(url, tmp / "out", key_file, "--ingress", ingress, "--proxy-replicas", "1")
    return Swept(ingress, tmp / "out", url, key_file, stand_in, output, code)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Swept]]:
    """One sweep per ingress, made when a test first asks, kept for the module."""
    made: dict[str, Swept] = {}
    with contextlib.ExitStack() as stack:

        def swept(ingress: str) -> Swept:
            if ingress not in made:
                made[ingress] = _swept(ingress, tmp_path_factory.mktemp(f"eval-{ingress}"), stack)
            return made[ingress]

        yield swept


@pytest.fixture(params=["host", "direct"])
def swept(request: pytest.FixtureRequest, sweeps: Callable[[str], Swept]) -> Swept:
    return sweeps(request.param)


@pytest.fixture
def host_swept(sweeps: Callable[[str], Swept]) -> Swept:
    """What resuming and comparing with `rollout` need: one sweep, either ingress."""
    return sweeps("host")


def test_every_row_is_an_evaluation_rate_limits_counted(swept: Swept) -> None:
    assert swept.code == 0, swept.output[-3000:]
    rows = pq.read_table(swept.out / "rollouts").to_pylist()
    assert len(rows) == 2
    for row in rows:
        assert row["ok"] and row["reward"] == 1.0, row
        assert (row["capture_level"], row["trainable"]) == ("text", False)
    assert not (swept.out / "sequences").exists() or not pq.read_table(swept.out / "sequences")
    # The 429s slowed calls instead of failing them, and the rows say which.
    assert swept.stand_in.refused_429 == THROTTLED
    turns = pq.read_table(swept.out / "turns").to_pylist()
    assert sum(t["upstream_retries"] for t in turns) == THROTTLED
    assert sum(r["counts"]["retried_calls"] for r in rows) == sum(
        1 for t in turns if t["upstream_retries"]
    )
    assert all(r["counts"]["engine_errors"] == 0 for r in rows)
    manifest = json.loads((swept.out / "_manifest.json").read_text())
    assert (manifest["capture"], manifest["upstream"]) == ("text", "anthropic")
    assert manifest["engine"]["capture_level"] == "text"


def test_the_key_reaches_the_upstream_and_nothing_else(swept: Swept) -> None:
    assert swept.code == 0, swept.output[-3000:]
    sent = generations(swept.stand_in)
    assert len(sent) >= 6 + THROTTLED  # 2 rollouts x 3 calls, and the refused tries
    assert all(headers["x-api-key"] == SECRET for headers in sent)
    envs = list(swept.out.glob("trials/*/agent/sandbox-env.txt"))
    assert len(envs) == 2 and all("PATH=" in env.read_text() for env in envs)
    ray_logs = [p for p in (swept.out / "logs" / "ray").rglob("*") if p.is_file()]
    if swept.ingress == "direct":  # the replicas' own logs are among those searched
        assert any(p.name.startswith("replica_capture") for p in ray_logs)
    written = [p for p in swept.out.rglob("*") if p.is_file()]
    assert swept.out / "_manifest.json" in written and ray_logs
    leaked = [p for p in written if SECRET.encode() in p.read_bytes()]
    assert leaked == [], f"the upstream key was written to {leaked}"
    assert SECRET not in swept.output


def test_every_row_says_what_made_it(swept: Swept) -> None:
    """Issue 35, item 2: a hosted model's rows name it and leave its files unknown (not
    faked); the harness's version and configuration are hashed as SCHEMA.md says."""
    assert swept.code == 0, swept.output[-3000:]
    served = json.loads((swept.out / "_manifest.json").read_text())["engine"]["served_model"]
    config = json.dumps(
        {"agent": "terminus-2", "agent_kwargs": {}, "profile": None},
        sort_keys=True,
        separators=(",", ":"),
    )
    expected = {
        "model_source": f"anthropic:{served}",
        "weights_sha256": None,
        "chat_template_sha256": None,
        "tokenizer_sha256": None,
        "harness_version": f"harbor {importlib.metadata.version('harbor')}",
        "harness_config_sha256": hashlib.sha256(config.encode()).hexdigest(),
    }
    rows = pq.read_table(swept.out / "rollouts").to_pylist()
    assert [row["provenance"] for row in rows] == [expected] * 2


def test_a_rerun_resumes_without_calling_the_upstream_again(host_swept: Swept) -> None:
    swept = host_swept
    assert swept.code == 0, swept.output[-3000:]
    before = len(generations(swept.stand_in))
    code, output = swept.sweep()
    assert code == 0, output[-3000:]
    assert "(2 already done)" in output
    assert len(pq.read_table(swept.out / "rollouts")) == 2
    assert len(generations(swept.stand_in)) == before


def test_rollout_rows_mean_what_the_sweep_s_rows_mean(host_swept: Swept, tmp_path: Path) -> None:
    """Issue 35, item 4: the same kind of run through `rollout` (results.jsonl) and
    `sweep` (the dataset) says the same `trainable`, `capture_level` and `reward`."""
    swept = host_swept
    code, output = rollout(
        swept.url,
        tmp_path / "out",
        "--upstream",
        "anthropic",
        "--capture",
        "text",
        "--upstream-key-file",
        str(swept.key_file),
    )
    assert code == 0, output
    (line,) = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    one = json.loads(line)
    fields = ("ok", "reward", "capture_level", "trainable", "provenance")
    for row in pq.read_table(swept.out / "rollouts").to_pylist():
        assert {f: row[f] for f in fields} == {f: one[f] for f in fields}
    assert one["trainable"] is False and one["capture_level"] == "text"
