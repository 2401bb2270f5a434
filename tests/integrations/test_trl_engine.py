"""TRL 1.16's GRPOTrainer trains through the online service on the real engine: the
documented example (examples/trl_grpo.py) run as written, two optimizer steps of one group
of two rollouts each, against the service of serve_configs/online_cpu.yaml.

The reward device: the test task `coin` (tests/fixtures/tasks/), whose verifier draws a
uniform random reward, so the two rollouts of a group get different rewards and each step
has a gradient. The 135M model solves no sample task often enough for that, and a reward
on what it said ties when every reply is cut at the token limit (CI saw both rollouts of
a group record only the proxy's budget-stop message).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harbor_ray.data.rebuild import rebuild_prompts
from harbor_ray.engine.lifecycle import EngineHandle
from tests.fixtures.online import Online, online_service
from tests.fixtures.policy_step import load, max_gap, rescore

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tests" / "fixtures" / "tasks"
TEMPERATURE = 0.7
# vLLM's and transformers' float32 CPU kernels over a whole agent conversation
# (tests/online/test_online_engine.py measured 1.5e-3 at worst).
SAME_OVER_A_CONVERSATION = 3e-3


@pytest.fixture(scope="module")
def online(
    engine: EngineHandle, prepared_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Online]:
    with online_service(
        engine, prepared_model_dir, tmp_path_factory.mktemp("online-trl"), dataset=str(TASKS)
    ) as service:
        yield service


def test_the_trl_example_trains_through_the_online_service(
    online: Online, prepared_model_dir: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "controller.key"
    key_file.write_text(online.key)
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "trl_grpo.py"),
            "--url",
            online.url,
            "--key-file",
            str(key_file),
            "--model",
            str(prepared_model_dir),
            "--tasks",
            "coin",
            "--steps",
            "2",
            "--num-generations",
            "2",
            "--temperature",
            str(TEMPERATURE),
            "--learning-rate",
            "5e-4",
            "--budget",
            "2",
            "--max-tokens",
            "48",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"the example ran in {time.monotonic() - started:.0f} s")
    for entry in summary["log"]:
        print(entry)
    print(f"weight updates (version, seconds): {summary['weight_updates']}")

    # Each step weighted its tokens by TRL's importance ratio to the recorded logprobs
    # (ServiceGRPOTrainer): the trained model is the one that sampled them, so every
    # ratio is about 1, none truncated, and every trained token is fresh.
    steps = [entry for entry in summary["log"] if "staleness/tokens_0" in entry]
    assert len(steps) == 2, summary["log"]
    for entry in steps:
        for bound in ("min", "max"):
            ratio = entry[f"sampling/importance_sampling_ratio/{bound}"]
            assert abs(math.log(ratio)) < SAME_OVER_A_CONVERSATION, entry
        assert entry["sampling/importance_sampling_ratio/clipped_fraction"] == 0
        assert entry["staleness/tokens_0"] > 0
        assert entry["staleness/tokens_1"] == entry["staleness/tokens_2+"] == 0

    # The engine served version 1 after step 1 and 2 after step 2.
    assert [version for version, _ in summary["weight_updates"]] == [1, 2]
    assert summary["policy_version"] == 2
    # The weights changed.
    stepped = tmp_path / "out" / "checkpoints" / "version-1"
    moved = max(
        (a - b).abs().max().item()
        for a, b in zip(
            load(prepared_model_dir).state_dict().values(),
            load(stepped).state_dict().values(),
            strict=True,
        )
    )
    assert moved > 0, "step 1 did not change the weights"

    # Each step trained on one group of two rollouts, whose rewards differ; step 1's ran
    # on version 0, step 2's on version 1 alone, every turn of them.
    rollouts = pq.read_table(online.out / "rollouts").to_pylist()
    by_version = {v: [r for r in rollouts if r["policy_version_max"] == v] for v in (0, 1)}
    for version, group in by_version.items():
        assert len(group) == 2 and all(r["ok"] for r in group), group
        assert {r["policy_version_min"] for r in group} == {version}
        assert len({r["reward"] for r in group}) == 2, [r["reward"] for r in group]

    # Step 2's recorded logprobs are the stepped model's at the sampling temperature.
    turns = rebuild_prompts(pq.read_table(online.out / "turns")).to_pylist()
    second = [t for t in turns if t["policy_version_start"] == 1]
    assert second and all(t["policy_version_end"] == 1 for t in second)
    for turn in second:
        assert turn["logprobs_mode"] == "processed"
        assert turn["sampling"]["temperature"] == TEMPERATURE
        ids = [*turn["prompt_ids"], *turn["token_ids"]]
        mask = [0] * len(turn["prompt_ids"]) + [1] * len(turn["token_ids"])
        new = rescore(stepped, ids, mask, TEMPERATURE)
        old = rescore(prepared_model_dir, ids, mask, TEMPERATURE)
        same, drift = max_gap(turn["logprobs"], new), max_gap(turn["logprobs"], old)
        ratio = math.exp(sum(n - r for n, r in zip(new, turn["logprobs"], strict=True)))
        print(
            f"turn of {len(ids)} ids, {len(new)} sampled: max |dlogp| {same:.2e} against "
            f"version 1 at T={TEMPERATURE}, {drift:.2e} against "
            f"version 0; IS ratio {ratio:.4f}"
        )
        assert same < SAME_OVER_A_CONVERSATION
        assert drift > same
