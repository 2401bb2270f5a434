"""A trial's cost in the container sandbox, against the local one and a Docker container.

All figures and ratios come from one run. The container sandbox
(harbor_ray.trials.sandbox.container) is the local bubblewrap sandbox with its `/` an
overlay over the task's image, which Docker builds and trials/images.py unpacks once
per image per node. Four parts, each printing its own figures and ratios:

1. Trial start and teardown, container vs local: per round, an environment's `start`
   and one `exec("true")` (time to first command), then its `stop(delete=True)`; the
   container sandbox over a small image (debian:bookworm-slim, one RUN, a WORKDIR)
   built and unpacked before the rounds. One untimed start of each first (it pays the
   one-off costs of a process: the image's WORKDIR looked up in Docker). Modes
   alternate round by round, and which goes first alternates too, so drift in the
   machine's load falls on both alike. Median and p90 of each, container / local.
2. For reference, a trial the way Docker's engine would run it: `docker create
   --network none IMG sleep infinity`, `docker start`, `docker exec ID true`, then
   `docker rm -f`, over the same image; median start-to-first-command and teardown
   against the container sandbox's. This is the measured reason the container sandbox
   runs bubblewrap over an unpacked image rather than a container per trial (with the
   vfs storage driver Docker copies the whole image per container). `--skip-docker`
   leaves it out.
3. An image build, cold vs cached: `ensure_image_root` on a build context unique to
   this run (a nonce file), so Docker's cache cannot serve its last layer; the base
   layers (and the RUN layer of part 1) may come from Docker's cache, so "cold" is this
   image's own layers built and unpacked, not a bare node's pull. Then the same call
   again, served by the unpacked root.
4. Rollouts per minute, the `oracle` agent (no model) on the bundled samples, every task
   x `--attempts` at `--concurrency`, local, then container, then local again (arms of
   a concurrent run cannot be interleaved; the two local figures show the drift). For
   the container arm each sample is copied with an environment/Dockerfile added
   (bookworm-slim, python3 for the verifiers, the task's files COPYed to /app), and the
   images are built before the clock starts (their time printed apart). Every rollout
   should come back ok with reward 1.0; those that did not are counted and shown.
   `--skip-rollouts` leaves it out.

Everything goes to a temporary directory under `--dir`: sandboxes, trials, task copies
and, unless `--images-dir` is given, the unpacked images. At the end it is removed, the
images this run tagged are removed from Docker (`docker rmi -f`; tags that were there
before are kept), and Docker is asked whether any container of this run remains.

    .venv/bin/python scripts/bench_container.py [--rounds 20] [--docker-rounds 3]
        [--attempts 10] [--concurrency 16] [--dir PATH] [--images-dir PATH]
        [--skip-docker] [--skip-rollouts]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from harbor.environments.base import BaseEnvironment
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.trials.datasets import TaskRef, resolve_dataset
from harbor_ray.trials.images import ImageRoot, ImageSource, ensure_image_root, image_key
from harbor_ray.trials.local_run import run_many
from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment
from harbor_ray.trials.sandbox.container import ContainerEnvironment
from harbor_ray.trials.spec import make_specs

SMALL_DOCKERFILE = "FROM debian:bookworm-slim\nRUN mkdir -p /app && echo x > /app/x\nWORKDIR /app\n"
# Part 3: the small image plus this run's nonce, as its last layer.
NONCE_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN mkdir -p /app && echo x > /app/x\n"
    "COPY nonce /app/nonce\n"
    "WORKDIR /app\n"
)
# Part 4: a sample task as an image. With a Dockerfile Harbor does not copy
# environment/ into the workdir, so the COPY does; the verifiers need python3 and bash.
SAMPLE_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends python3"
    " && rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
    "COPY . /app\n"
)
# Put on this run's `docker create`d containers, to find any left at the end.
LABEL = "harbor-ray-bench-container"
ENVIRONMENT = "bench-task"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def docker(*argv: str, check: bool = True) -> str:
    result = subprocess.run(
        ["docker", *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"`docker {' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result.stdout.strip()


def docker_tags() -> set[str]:
    return set(docker("images", "--format", "{{.Repository}}:{{.Tag}}").split())


def dockerfile_dir(path: Path, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    return path


class Run:
    """This run's directories and what it made in Docker, for the cleanup."""

    def __init__(self, root: Path, images_dir: Path) -> None:
        self.root = root
        self.images_dir = images_dir
        self.sandboxes_dir = root / "sandboxes"
        self.references: set[str] = set()  # the images' tags this run asked Docker for
        self.keys: set[str] = set()  # their build contexts' keys (unpack containers)

    def image(self, directory: Path) -> tuple[ImageRoot, float]:
        """`ensure_image_root` of a Dockerfile directory, and its wall seconds."""
        self.keys.add(image_key(directory))
        started = time.perf_counter()
        root = ensure_image_root(ImageSource(directory, None), self.images_dir)
        seconds = time.perf_counter() - started
        self.references.add(root.reference)
        return root, seconds


# --- 1 and 2: a trial's start and teardown -----------------------------------------------


async def start_and_stop(environment: BaseEnvironment) -> tuple[float, float]:
    """Seconds from `start` to the end of the first command, and for `stop(delete=True)`."""
    started = time.perf_counter()
    await environment.start(force_build=False)
    result = await environment.exec("true")
    first = time.perf_counter() - started
    if result.return_code != 0:
        raise RuntimeError(f"`true` exited {result.return_code}: {result.stderr}")
    started = time.perf_counter()
    await environment.stop(delete=True)
    return first, time.perf_counter() - started


def makers(run: Run, image_dir: Path) -> dict[str, Callable[[int], BaseEnvironment]]:
    empty = run.root / "local-environment"
    empty.mkdir()

    def container(number: int) -> BaseEnvironment:
        return ContainerEnvironment(
            environment_dir=image_dir,
            environment_name=ENVIRONMENT,
            session_id=f"c{number}__env",
            trial_paths=TrialPaths(run.root / f"c{number}"),
            task_env_config=EnvironmentConfig(),
            sandboxes_dir=run.sandboxes_dir,
            images_dir=run.images_dir,
        )

    def local(number: int) -> BaseEnvironment:
        return BwrapEnvironment(
            environment_dir=empty,
            environment_name=ENVIRONMENT,
            session_id=f"l{number}__env",
            trial_paths=TrialPaths(run.root / f"l{number}"),
            task_env_config=EnvironmentConfig(),
            sandboxes_dir=run.sandboxes_dir,
        )

    return {"container": container, "local": local}


async def trial_rounds(
    run: Run, image_dir: Path, rounds: int
) -> dict[str, tuple[list[float], list[float]]]:
    make = makers(run, image_dir)
    for maker in make.values():  # untimed: a process's one-off costs
        await start_and_stop(maker(0))
    figures: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in make}
    for number in range(1, rounds + 1):
        order = list(make) if number % 2 else list(reversed(make))
        for mode in order:
            first, teardown = await start_and_stop(make[mode](number))
            figures[mode][0].append(first)
            figures[mode][1].append(teardown)
    return figures


def docker_rounds(reference: str, rounds: int) -> tuple[list[float], list[float]]:
    firsts, teardowns = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        container = docker(
            "create", "--network", "none", "--label", LABEL, reference, "sleep", "infinity"
        )
        try:
            docker("start", container)
            docker("exec", container, "true")
            firsts.append(time.perf_counter() - started)
        finally:
            started = time.perf_counter()
            docker("rm", "-f", container)
        teardowns.append(time.perf_counter() - started)
    return firsts, teardowns


def print_trials(figures: dict[str, tuple[list[float], list[float]]]) -> dict[str, float]:
    """Prints part 1; the medians, by "<mode> first" and "<mode> teardown"."""
    medians = {}
    for mode, (firsts, teardowns) in figures.items():
        for what, seconds in (("first", firsts), ("teardown", teardowns)):
            medians[f"{mode} {what}"] = statistics.median(seconds)
            label = "start + first command" if what == "first" else "stop(delete=True)   "
            print(
                f"  {mode:9s} {label}: median {ms(statistics.median(seconds))}, "
                f"p90 {ms(p90(seconds))}, min {ms(min(seconds))}, max {ms(max(seconds))} "
                f"({len(seconds)} trials)"
            )
    for what in ("first", "teardown"):
        ratio = medians[f"container {what}"] / medians[f"local {what}"]
        print(
            f"  container / local, {'time to first command' if what == 'first' else 'teardown'}"
            f" (medians): {ratio:.2f}x"
        )
    return medians


# --- 4: rollouts per minute ---------------------------------------------------------------


def container_tasks(samples: list[TaskRef], into: Path) -> list[TaskRef]:
    """The samples copied under `into`, each with an environment/Dockerfile."""
    for task in samples:
        copy = into / task.name
        shutil.copytree(task.path, copy)
        (copy / "environment").mkdir(exist_ok=True)
        (copy / "environment" / "Dockerfile").write_text(SAMPLE_DOCKERFILE)
    report = resolve_dataset(str(into))
    if report.problems:
        raise RuntimeError(f"the copied samples do not load: {report.problems}")
    return report.tasks


async def rollouts(
    run: Run, tasks: list[TaskRef], sandbox: str, arm: str, attempts: int, concurrency: int
) -> float:
    kwargs = {"sandboxes_dir": str(run.sandboxes_dir)}
    if sandbox == "container":
        kwargs["images_dir"] = str(run.images_dir)
    specs = make_specs(
        tasks,
        attempts,
        agent="oracle",
        sandbox=sandbox,
        trials_dir=run.root / f"trials-{arm}",
        sandbox_kwargs=kwargs,
    )
    failed: list[RolloutRecord] = []

    def on_result(record: RolloutRecord) -> None:
        if not record.result.ok or record.result.reward != 1.0:
            failed.append(record)

    started = time.perf_counter()
    records = await run_many(specs, None, concurrency=concurrency, on_result=on_result)
    seconds = time.perf_counter() - started
    setup = [
        r.result.timings["environment_setup"]
        for r in records
        if "environment_setup" in r.result.timings
    ]
    total = [r.result.timings["total"] for r in records if "total" in r.result.timings]
    print(
        f"  {arm:11s} {len(records)} rollouts in {seconds:6.1f} s: "
        f"{len(records) / seconds * 60:6.1f} rollouts/min; per rollout median "
        f"environment setup {statistics.median(setup) if setup else float('nan'):.2f} s, "
        f"total {statistics.median(total) if total else float('nan'):.2f} s; "
        f"not ok with reward 1.0: {len(failed)}   [{load()}]"
    )
    by_task: dict[str, list[RolloutRecord]] = {}
    for record in failed:
        by_task.setdefault(record.result.task, []).append(record)
    for task, records_of_task in by_task.items():  # one example per task
        result = records_of_task[0].result
        said = (result.error or "").strip() or verifier_said(result.trial_dir)
        print(
            f"    {task}: {len(records_of_task)} not ok with reward 1.0, e.g. "
            f"{result.rollout_id}: ok={result.ok} reward={result.reward} "
            f"error_type={result.error_type}: {said[-600:]}"
        )
    return len(records) / seconds * 60


def verifier_said(trial_dir: str | None) -> str:
    """The end of what a trial's agent and verifier printed (a reward 0 has no error)."""
    if trial_dir is None:
        return ""
    said = []
    for name in ("agent/oracle.txt", "verifier/test-stdout.txt"):
        path = Path(trial_dir) / name
        if path.is_file():
            said.append(f"{name}: " + " | ".join(path.read_text(errors="replace").split("\n")))
    return "; ".join(said)


def rollout_part(run: Run, attempts: int, concurrency: int) -> None:
    samples = resolve_dataset("samples").tasks
    print(
        f"\n4. Rollouts/min, oracle agent, {len(samples)} sample tasks x {attempts} "
        f"attempts = {len(samples) * attempts} rollouts at concurrency {concurrency}"
    )
    tasks = container_tasks(samples, run.root / "container-tasks")
    started = time.perf_counter()
    contexts: dict[str, str] = {}  # build context's key -> the first task with it
    for task in tasks:
        key = image_key(task.path / "environment")
        root, seconds = run.image(task.path / "environment")
        shared = f"; same build context as {contexts[key]}" if key in contexts else ""
        contexts.setdefault(key, task.name)
        print(
            f"  image of {task.name:18s} {seconds:6.1f} s "
            f"({'built/unpacked' if root.built else 'cached'}, build_s {root.build_s:.1f}"
            f"{shared})"
        )
    print(
        f"  images for the container arm, before the clock: "
        f"{time.perf_counter() - started:.1f} s in all   [{load()}]"
    )
    rates = {}
    for arm, sandbox, arm_tasks in (
        ("local", "local", samples),
        ("container", "container", tasks),
        ("local again", "local", samples),
    ):
        rates[arm] = asyncio.run(rollouts(run, arm_tasks, sandbox, arm, attempts, concurrency))
    local = statistics.mean([rates["local"], rates["local again"]])
    print(
        f"  container / local: {rates['container'] / rates['local']:.2f}x against the "
        f"first local arm, {rates['container'] / rates['local again']:.2f}x against the "
        f"second, {rates['container'] / local:.2f}x against their mean"
    )


# --- the run ------------------------------------------------------------------------------


def bench(run: Run, args: argparse.Namespace) -> None:
    print(f"Start: {load()}")
    print(
        f"\n1. Trial start and teardown, container sandbox vs local sandbox, "
        f"{args.rounds} rounds alternating"
    )
    small_dir = dockerfile_dir(run.root / "small-image", SMALL_DOCKERFILE)
    small, seconds = run.image(small_dir)
    print(
        f"  small image {small.reference} ({small.digest[:19]}) ready before the rounds "
        f"in {seconds:.1f} s ({'built/unpacked' if small.built else 'cached'})"
    )
    figures = asyncio.run(trial_rounds(run, small_dir, args.rounds))
    medians = print_trials(figures)
    print(f"  [{load()}]")

    if not args.skip_docker:
        print(
            f"\n2. For reference, a Docker container per trial (docker create --network "
            f"none, start, exec true; rm -f), {args.docker_rounds} rounds: the measured "
            f"reason the container sandbox runs bubblewrap over an unpacked image"
        )
        firsts, teardowns = docker_rounds(small.reference, args.docker_rounds)
        for what, seconds_list, key in (
            ("start + first command", firsts, "first"),
            ("rm -f               ", teardowns, "teardown"),
        ):
            median = statistics.median(seconds_list)
            print(
                f"  docker    {what}: median {ms(median)}, min {ms(min(seconds_list))}, "
                f"max {ms(max(seconds_list))} ({len(seconds_list)} containers); "
                f"docker / container sandbox {median / medians[f'container {key}']:.1f}x"
            )
        print(f"  [{load()}]")

    print(
        "\n3. An image build, cold vs cached (cold: this image's own layers built + "
        "unpacked; base layers from Docker's cache)"
    )
    nonce_dir = dockerfile_dir(
        run.root / "nonce-image", NONCE_DOCKERFILE, {"nonce": uuid.uuid4().hex + "\n"}
    )
    cold, cold_s = run.image(nonce_dir)
    cached, cached_s = run.image(nonce_dir)
    print(
        f"  cold   ensure_image_root: {cold_s:7.2f} s wall, build_s {cold.build_s:.2f} "
        f"(built: {cold.built})"
    )
    print(
        f"  cached ensure_image_root: {cached_s:7.3f} s wall, build_s {cached.build_s:.2f} "
        f"(built: {cached.built})"
    )
    print(f"  cold / cached (wall): {cold_s / cached_s:.0f}x   [{load()}]")

    if not args.skip_rollouts:
        rollout_part(run, args.attempts, args.concurrency)


def clean_up(run: Run, tags_before: set[str]) -> None:
    print("\nCleanup")
    for reference in sorted(run.references):
        if reference in tags_before:
            print(f"  kept {reference}: it was in Docker before this run")
        else:
            docker("rmi", "-f", reference, check=False)
    left = docker(
        "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.ID}} {{.Names}}"
    ).splitlines()
    names = {f"harbor-ray-unpack-{key[:16]}" for key in run.keys}
    left += [
        line
        for line in docker("ps", "-a", "--format", "{{.ID}} {{.Names}}").splitlines()
        if any(line.split()[-1].startswith(name) for name in names)
    ]
    tags = docker_tags() & (run.references - tags_before)
    sandboxes = list(run.sandboxes_dir.iterdir()) if run.sandboxes_dir.exists() else []
    for line in left:
        print(f"  a container of this run remains: {line}")
    for tag in sorted(tags):
        print(f"  an image of this run remains: {tag}")
    if sandboxes:
        print(
            f"  {len(sandboxes)} sandbox directories remained (removed with the run's "
            f"directory): {', '.join(p.name for p in sandboxes[:5])}"
        )
    if not (left or tags or sandboxes):
        print(
            f"  removed {len(run.references - tags_before)} image tags of this run; "
            "no container, image or sandbox of this run remains"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=20, help="rounds of part 1, each a trial of both sandboxes"
    )
    parser.add_argument(
        "--docker-rounds", type=int, default=3, help="containers of part 2 (each takes seconds)"
    )
    parser.add_argument(
        "--attempts", type=int, default=10, help="attempts per sample task in part 4"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="rollouts at once in part 4")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the run's temporary directory goes",
    )
    parser.add_argument(
        "--images-dir",
        type=Path,
        default=None,
        help="where images are unpacked, then kept (None: under the run's "
        "temporary directory, removed at the end)",
    )
    parser.add_argument("--skip-docker", action="store_true", help="leave out part 2")
    parser.add_argument("--skip-rollouts", action="store_true", help="leave out part 4")
    args = parser.parse_args()
    tags_before = docker_tags()
    with tempfile.TemporaryDirectory(prefix="bench-container-", dir=args.dir) as root:
        run = Run(Path(root), args.images_dir or Path(root) / "images")
        try:
            bench(run, args)
        finally:
            clean_up(run, tags_before)
    print(f"End: {load()}")


if __name__ == "__main__":
    main()
