#!/bin/bash
# Exactly these lines, in this order; a final newline is optional.
python3 - <<'PY'
from pathlib import Path

try:
    lines = Path("/app/regions.txt").read_text().removesuffix("\n").split("\n")
except (OSError, UnicodeDecodeError):
    lines = None
reward = 1 if lines == ["east", "north", "south", "west"] else 0
Path("/logs/verifier/reward.txt").write_text(f"{reward}\n")
PY
