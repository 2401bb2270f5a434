"""`ray job submit --working-dir . -- python jobs/sweep.py --agent oracle --out /data/x`.

The same driver and flags as `harbor-ray sweep`, joining the cluster the job runs on
(`--ray-address auto` unless given), except that `--out` must be an absolute path: a
job runs in a temporary copy of its working dir, where a relative one would land.
"""

import os
import sys

# Entry-point switches, set before Ray or Harbor are imported (see harbor_ray.cli.main):
# workers must use this interpreter rather than `uv run`, and Harbor/LiteLLM must not
# reach for the network at import.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Job logs are not a terminal: without a width, rich wraps the progress line at 80.
os.environ.setdefault("COLUMNS", "120")

from harbor_ray.cli import app


def _out(argv: list[str]) -> str | None:
    """The value of `--out` in `argv`, if given."""
    for i, arg in enumerate(argv):
        if arg == "--out":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("--out="):
            return arg.removeprefix("--out=")
    return None


def main(argv: list[str]) -> None:
    out = _out(argv)
    if "--help" not in argv and not (out and os.path.isabs(out)):
        print("error: pass --out as an absolute path: a job runs in a temporary copy of "
              "its working dir, where a relative one would land", file=sys.stderr)
        sys.exit(2)
    address = [] if any(a.startswith("--ray-address") for a in argv) else ["--ray-address",
                                                                          "auto"]
    app(["sweep", *address, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
