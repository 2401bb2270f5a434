#!/bin/bash
# Several reward keys: reward is 1.0 only when every check passes; tests_passed counts
# the checks that did; style is 1.0 when every line of stats.py fits in 79 characters
# without trailing whitespace, else 0.5.
python3 - <<'PY'
import json
import sys
from pathlib import Path

SOURCE = Path("/app/stats.py")
CHECKS = [
    ("mean", [2, 4], 3),
    ("mean", [1, 2], 1.5),
    ("median", [4, 1, 3, 2], 2.5),
]


def passed_checks():
    sys.path.insert(0, str(SOURCE.parent))
    try:
        import stats
    except Exception as error:
        print(f"cannot import {SOURCE}: {error!r}")
        return 0
    passed = 0
    for function, argument, expected in CHECKS:
        try:
            got = getattr(stats, function)(list(argument))
        except Exception as error:
            got = error
        ok = type(got) in (int, float) and got == expected
        print(f"{function}({argument}) = {got!r}, expected {expected!r}: {ok}")
        passed += ok
    return passed


def style():
    try:
        lines = SOURCE.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return 0.5
    clean = all(len(line) <= 79 and line == line.rstrip() for line in lines)
    return 1.0 if clean else 0.5


passed = passed_checks()
rewards = {
    "reward": 1.0 if passed == len(CHECKS) else 0.0,
    "style": style(),
    "tests_passed": passed,
}
Path("/logs/verifier/reward.json").write_text(json.dumps(rewards))
print(rewards)
PY
