"""`ray job submit --working-dir . -- python jobs/sweep.py --agent oracle --out /data/x`.

The same driver and flags as `harbor-ray sweep`, joining the cluster the job runs on
(`--ray-address auto` unless given), except that `--out` must be an absolute path: a
job runs in a temporary copy of its working dir, where a relative one would land.
"""

import os
import sys

from harbor_ray.switches import set_switches

set_switches()  # before Ray or Harbor is imported
# Job logs are not a terminal: without a width, rich wraps the progress line at 80.
os.environ.setdefault("COLUMNS", "120")

import typer  # noqa: E402

from harbor_ray.cli import app  # noqa: E402


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
        print(
            "error: pass --out as an absolute path: a job runs in a temporary copy of "
            "its working dir, where a relative one would land",
            file=sys.stderr,
        )
        sys.exit(2)
    # The cluster the job runs on, unless --ray-address says otherwise.
    typer.main.get_command(app).main(
        ["sweep", *argv], prog_name="jobs/sweep.py", default_map={"sweep": {"ray_address": "auto"}}
    )


if __name__ == "__main__":
    main(sys.argv[1:])
