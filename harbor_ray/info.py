"""`harbor-ray info`: one report of what can run here, as data first, then rendered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.errors import CertificationError, DatasetError
from harbor_ray.qualify.harnesses import harbor_harnesses, harness_table
from harbor_ray.trials.agents import describe_agents
from harbor_ray.trials.backends import (
    ON_THIS_NODE,
    backend_names,
    check_backend,
    provides_task_image,
)
from harbor_ray.trials.dataset_cache import cached_datasets, default_cache_root
from harbor_ray.trials.datasets import resolve_dataset
from harbor_ray.trials.installs import DEFAULT_CACHE, installed


async def gather(
    llm_url: str | None,
    dataset_specs: Sequence[str],
    *,
    probe: str | None = None,
    sandbox_kwargs: Mapping[str, Any] | None = None,
    probe_image: str | None = None,
    agents_cache: Path | None = None,
    datasets_cache: Path | None = None,
) -> dict[str, Any]:
    """Everything `info` shows, JSON-serialisable. `sandbox_kwargs` are the constructor
    kwargs of the `probe` backend (its row is checked with them); `probe` also starts
    and stops one sandbox of it; `agents_cache` is where agent CLIs are installed;
    `datasets_cache` where hub and registry datasets are."""
    datasets_cache = datasets_cache or default_cache_root()
    data = {
        "sandboxes": [
            {
                **asdict(check_backend(name, sandbox_kwargs if name == probe else None)),
                "needs_proxy_url": needs_proxy_url(name),
                "task_image": provides_task_image(name),
            }
            for name in backend_names()
        ],
        "agents": describe_agents(),
        "installed_agents": installed_agents(agents_cache),
        "harnesses": [asdict(harness) for harness in harness_table(harbor_harnesses())],
        "datasets": [_dataset(spec, datasets_cache) for spec in dataset_specs],
        "cached_datasets": [
            {"spec": entry.spec, "path": str(entry.path), "fetched_at": entry.fetched_at}
            for entry in cached_datasets(datasets_cache)
        ],
        "engine": await _engine(llm_url) if llm_url else None,
        "probe": None,
    }
    if probe is not None:
        from harbor_ray.trials.sandbox_probe import DEFAULT_PROBE_IMAGE, probe_backend

        result = await probe_backend(
            probe, sandbox_kwargs, image=probe_image or DEFAULT_PROBE_IMAGE
        )
        data["probe"] = asdict(result)
    return data


def installed_agents(cache: Path | None) -> list[dict[str, Any]]:
    """The pinned agent CLIs and whether each is in the cache (`agents list`, `info`)."""
    return [
        {
            "agent": entry.pin.agent,
            "package": entry.pin.package,
            "registry": entry.pin.registry,
            "version": entry.pin.version,
            "installed": entry.present,
            "path": str(entry.path),
        }
        for entry in installed(cache or DEFAULT_CACHE)
    ]


def render_installed(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="agent CLIs for the sandbox (harbor-ray agents install)")
    for column in ("agent", "package", "version", "installed"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["agent"],
            f"{row['package']} ({row['registry']})",
            row["version"],
            "yes" if row["installed"] else "[yellow]no[/yellow]",
        )
    console.print(table)


def render_harnesses(rows: list[dict[str, Any]], console: Console) -> None:
    qualified = sum(1 for row in rows if row["qualified"])
    level_2 = sum(1 for row in rows if row["qualified"] and row["level_2"])
    table = Table(
        title=f"Harbor's harnesses ({len(rows)}; {qualified} qualified at level "
        f"1, {level_2} of them also at level 2, harbor-ray qualify)"
    )
    for column in ("harness", "qualified", "level 2", "why not"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"],
            "yes" if row["qualified"] else "[yellow]no[/yellow]",
            "yes" if row["level_2"] else "-",
            row["reason"] or (row["level_2_reason"] and f"level 2: {row['level_2_reason']}"),
        )
    console.print(table)


def _dataset(spec: str, cache: Path) -> dict[str, Any]:
    try:
        report = resolve_dataset(spec, cache=cache)
    except DatasetError as exc:
        return {"spec": spec, "error": str(exc), "tasks": [], "problems": []}
    return {
        "spec": spec,
        "tasks": [task.name for task in report.tasks],
        "problems": [{"task": p.name, "reason": p.reason} for p in report.problems],
    }


async def _engine(url: str) -> dict[str, Any]:
    engine = HttpEngine(url, timeout_s=120)
    try:
        return {"certified": True, **(await certify(engine, engine.root)).model_dump()}
    except CertificationError as exc:
        return {"certified": False, "url": url, "error": str(exc)}
    finally:
        await engine.aclose()


def needs_proxy_url(backend: str) -> bool:
    """Whether an agent inside this backend's sandboxes needs `--proxy-url` to reach the
    capture proxy: all but harbor_ray's own (`local`, `container`), whose sandboxes get
    the host's proxy forwarded in; the others run elsewhere (a cloud, a VM, a container
    network) and cannot reach the host's loopback."""
    return backend not in ON_THIS_NODE


def render(data: dict[str, Any], console: Console) -> None:
    sandboxes = Table(title="sandbox backends")
    for column in (
        "backend",
        "usable",
        "why",
        "task's own image",
        "in-sandbox agents need --proxy-url",
    ):
        sandboxes.add_column(column)
    for row in data["sandboxes"]:
        sandboxes.add_row(
            row["name"],
            "yes" if row["usable"] else "[red]no[/red]",
            row["reason"],
            "yes" if row["task_image"] else "[yellow]no: host userland[/yellow]",
            "yes" if row["needs_proxy_url"] else "no",
        )
    console.print(sandboxes)

    agents = Table(title="agents")
    for column in ("agent", "runs", "model", "dialect", "wired", "note"):
        agents.add_column(column)
    for row in data["agents"]:
        agents.add_row(
            row["agent"],
            row["runs"],
            "yes" if row["needs_model"] else "no",
            row["dialect"] or "-",
            "yes" if row["wired"] else "no",
            row["note"],
        )
    console.print(agents)
    render_installed(data["installed_agents"], console)
    render_harnesses(data["harnesses"], console)

    for dataset in data["datasets"]:
        if "error" in dataset:
            console.print(f"dataset {dataset['spec']}: [red]{dataset['error']}[/red]")
            continue
        console.print(
            f"dataset {dataset['spec']}: {len(dataset['tasks'])} tasks: "
            + ", ".join(dataset["tasks"])
        )
        for problem in dataset["problems"]:
            console.print(f"  [yellow]broken[/yellow] {problem['task']}: {problem['reason']}")
    cached = Table(title="cached datasets (harbor-ray datasets prefetch)")
    for column in ("spec", "fetched", "path"):
        cached.add_column(column)
    for row in data["cached_datasets"]:
        cached.add_row(row["spec"], row["fetched_at"], row["path"])
    console.print(cached)

    probe = data["probe"]
    if probe is not None:
        if probe["ok"]:
            console.print(
                f"probe {probe['name']}: {probe['reason']} (start "
                f"{probe['start_s']:.1f} s, stop {probe['stop_s']:.1f} s)"
            )
        else:
            console.print(f"probe {probe['name']}: [red]failed[/red]: {probe['reason']}")

    engine = data["engine"]
    if engine is not None:
        if engine["certified"]:
            tools = "yes" if engine["tool_calling"] else f"no ({engine['tool_calling_fix']})"
            console.print(
                f"engine {engine['url']}: certified, serves {engine['served_model']}"
                f", version {engine['engine_version']}, tool calling {tools}, "
                f"logprobs {engine['logprobs_mode']}"
            )
        else:
            console.print(f"engine {engine['url']}: [red]refused[/red]: {engine['error']}")
