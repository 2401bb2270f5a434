"""`ray job submit --working-dir . -- python jobs/sweep.py --agent oracle --out /data/x`.

The same driver and flags as `harbor-ray sweep`, joining the cluster the job runs on
(`--ray-address auto` unless given).
"""

import os
import sys

# Entry-point switches, set before Ray or Harbor are imported (see harbor_ray.cli.main):
# workers must use this interpreter rather than `uv run`, and Harbor/LiteLLM must not
# reach for the network at import.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harbor_ray.cli import app


def main(argv: list[str]) -> None:
    address = [] if any(a.startswith("--ray-address") for a in argv) else ["--ray-address",
                                                                          "auto"]
    app(["sweep", *address, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
