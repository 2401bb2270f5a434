"""What harbor_ray runs, as library calls: a typed request in, the outcome out.

- `run_sweep(SweepRequest(...))`: tasks x attempts on Ray, into a Parquet dataset;
- `run_rollouts(RolloutRequest(...))`: rollouts in this process, into results.jsonl;
- `run_qualify(QualifyRequest(...))`: agent CLIs qualified, a report written.

The CLI's commands are thin shells over these. A request that cannot work raises a
`harbor_ray.errors.HarborRayError` naming the fix before anything is started.
"""

# A job starts Ray workers: switch Ray's uv hook off before Ray is imported (or refuse,
# naming the fix, when it was imported first under `uv run`).
from harbor_ray.switches import set_switches

set_switches()
