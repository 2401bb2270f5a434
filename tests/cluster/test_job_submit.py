"""`ray job submit` of jobs/sweep.py to the session's Ray, through its job server.

The repo root is the job's working dir (uploaded, as `ray job submit --working-dir .`
does); the entrypoint runs this interpreter, as a cluster started from the venv would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


@pytest.fixture
def jobs(ray_dashboard_url: str) -> Iterator[JobSubmissionClient]:
    """A job client; jobs a test leaves running are stopped."""
    client = JobSubmissionClient(ray_dashboard_url)
    before = {job.submission_id for job in client.list_jobs()}
    yield client
    for job in client.list_jobs():
        if job.submission_id not in before and not job.status.is_terminal():
            client.stop_job(job.submission_id)


def _submit_and_wait(client: JobSubmissionClient, *args: str) -> tuple[JobStatus, str]:
    """(the terminal status, the logs) of `python jobs/sweep.py ARGS` submitted as a job."""
    job = client.submit_job(
        entrypoint=" ".join([sys.executable, "jobs/sweep.py", *args]),
        runtime_env={"working_dir": str(ROOT)},
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not (status := client.get_job_status(job)).is_terminal():
        if time.monotonic() > deadline:
            client.stop_job(job)
            pytest.fail(
                f"job {job} still {status} after {TIMEOUT_S} s:\n{client.get_job_logs(job)}"
            )
        time.sleep(1)
    return status, client.get_job_logs(job)


def test_sweep_job_writes_the_dataset(jobs: JobSubmissionClient, tmp_path: Path) -> None:
    out = tmp_path / "out"
    status, logs = _submit_and_wait(
        jobs,
        "--agent",
        "oracle",
        "--dataset",
        "samples",
        "--task",
        "hello-file",
        "--attempts",
        "2",
        "--concurrency",
        "2",
        "--out",
        str(out),
        "--name",
        "job",
    )

    assert status == JobStatus.SUCCEEDED, logs
    # The summary (rich wraps the job's output at 80 columns: no path is matched).
    assert "2 rollouts in" in logs and "2 ok, peak in flight" in logs, logs
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert sorted(r["rollout_id"] for r in rows) == ["hello-file__0__job", "hello-file__1__job"]
    assert all(r["ok"] and r["reward"] == 1.0 for r in rows), rows


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--agent", "no-such-agent", "--out", "{out}"], "unknown agent 'no-such-agent'"),
        (["--agent", "oracle", "--out", "out"], "pass --out as an absolute path"),
    ],
    ids=["unknown-agent", "relative-out"],
)
def test_bad_flag_fails_the_job_and_says_why(
    jobs: JobSubmissionClient, tmp_path: Path, flags: list[str], reason: str
) -> None:
    out = tmp_path / "out"
    status, logs = _submit_and_wait(
        jobs, "--task", "hello-file", *(f.format(out=out) for f in flags)
    )

    assert status == JobStatus.FAILED, logs
    assert reason in logs, logs
    assert not out.exists()
