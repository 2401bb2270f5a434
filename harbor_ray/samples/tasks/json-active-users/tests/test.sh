#!/bin/bash
# latency_bonus is null on purpose: a verifier may leave a key it could not measure
# empty, next to a good one. Harbor 0.25 refuses the whole reward.json for it
# (VerifierOutputParseError); harbor_ray reads the file itself and drops only that key.
python3 - <<'PY'
import json
from pathlib import Path

try:
    names = json.loads(Path("/app/active.json").read_text())
except (OSError, ValueError):
    names = None
reward = 1.0 if names == ["anna", "chen", "mara", "zoe"] else 0.0
rewards = {"reward": reward, "latency_bonus": None}
Path("/logs/verifier/reward.json").write_text(json.dumps(rewards))
PY
