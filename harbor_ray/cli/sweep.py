"""`harbor-ray sweep`: tasks x attempts on Ray rollout hosts, into a Parquet dataset, with
its progress, its summary and its report."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

import harbor_ray.cli.options as opt
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cli.fleet_flags import FROM_FLAGS, FleetValues, fleet_flags
from harbor_ray.cli.options import LOG_NAME, Exit, command_output, console, phases_of, show_log


@fleet_flags
def sweep(
    agent: Annotated[str, typer.Option(help="Agent name (see `harbor-ray info`).")],
    dataset: Annotated[
        str,
        typer.Option(
            help="Task dir, dir of task dirs, REGISTRY.json:NAME[@VERSION], or `samples`."
        ),
    ] = "samples",
    task: opt.TaskOption = None,
    llm_url: opt.LlmUrlOption = None,
    engine: Annotated[
        Path | None,
        typer.Option(
            help="Instead of --llm-url: start the engine from this Serve YAML on the cluster "
            "for the sweep, and stop it after."
        ),
    ] = None,
    model: opt.ModelOption = None,
    sandbox: opt.SandboxOption = "local",
    sandbox_arg: opt.SandboxArgOption = None,
    n: opt.AttemptsOption = 1,
    # The fleet settings: a flag each, made from FleetSettings (cli/fleet_flags.py).
    fleet: FleetValues = FROM_FLAGS,
    budget: opt.BudgetOption = 20,
    deadline: Annotated[
        float | None,
        typer.Option(
            help="Seconds a rollout may take: then it ends itself (row `deadline`, sandbox "
            "torn down). One with no row --grace seconds later is cancelled on its host; "
            "one deaf to that for another --grace costs its host (its neighbours are "
            "retried)."
        ),
    ] = 900.0,
    temperature: opt.TemperatureOption = None,
    max_tokens: opt.MaxTokensOption = None,
    reward_key: opt.RewardKeyOption = None,
    name: Annotated[
        str,
        typer.Option(
            help="Run name, part of every rollout id (<task>__<attempt>__<name>): rerunning "
            "with the same name and --out resumes."
        ),
    ] = "sweep",
    out: Annotated[
        Path, typer.Option(help="Dataset directory (rollouts/, sequences/, turns/, trials/).")
    ] = Path("sweep"),
    ray_address: Annotated[
        str | None,
        typer.Option(help="Ray cluster to run on (e.g. `auto`). Default: start a local one."),
    ] = None,
    proxy_replicas: Annotated[
        int,
        typer.Option(
            help="Capture proxy replicas (a Ray Serve deployment) between agents and the "
            "engine, with --ingress direct or serve (host deploys none)."
        ),
    ] = 2,
    commit_every_s: Annotated[
        float,
        typer.Option(
            "--commit-every",
            help="Seconds between commits of finished rows to --out (one Parquet part per "
            "table per commit; 0: a commit per rollout). A driver killed in between "
            "loses only the rows since the last commit; a rerun redoes them.",
        ),
    ] = 2.0,
    ingress: Annotated[
        str,
        typer.Option(
            help="How agents reach the capture proxy: `host` (each rollout host serves the "
            "proxy for its own sessions and calls the engine: no replicas, no actor "
            "calls on the hot path, the least CPU per model call), `direct` (--proxy-"
            "replicas Serve replicas, reached by a relay in each host; needed for "
            "--proxy-url), or `serve` (the replicas through Serve's HTTP proxy)."
        ),
    ] = "host",
    engine_timeout: opt.EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    proxy_url: Annotated[
        str | None,
        typer.Option(
            help="The capture proxy's address for agents in sandboxes that do not run on "
            "their host's node (cloud backends: `info` says which need it), e.g. "
            "http://NODE-OR-BALANCER:8770. A relay on every node listens where it "
            "lands (--proxy-bind) while the sweep runs; calls need their session key. "
            "Needs --ingress direct. Default: none, nothing listens off loopback."
        ),
    ] = None,
    proxy_bind: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT each node's relay listens on for --proxy-url (default: every "
            "interface on its port; a port taken on any node fails the start)."
        ),
    ] = None,
    log_file: Annotated[Path | None, opt.log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: opt.VerboseOption = False,
    view: Annotated[
        bool,
        typer.Option(
            help="Also serve the live report and trace viewer of --out while the sweep runs "
            "(as `harbor-ray view`, on loopback; stops with the sweep)."
        ),
    ] = False,
    view_port: Annotated[
        int, typer.Option(help="Port of --view (0 picks a free one; the URL is printed).")
    ] = 8766,
    agents_cache: opt.AgentsCacheOption = None,
    stitch: opt.StitchOption = True,
    engine_kind: opt.EngineKindOption = "auto",
    host_userland: opt.HostUserlandOption = False,
    capture: opt.CaptureOption = "tokens",
    upstream: opt.UpstreamOption = "openai-chat",
    upstream_key_file: opt.UpstreamKeyFileOption = None,
) -> None:
    """Run tasks x attempts on Ray rollout hosts, into a resumable Parquet dataset.

    At the end it writes OUT/report.html (plots and a trace viewer, as
    `harbor-ray report`); the summary prints its path.

    Evaluating a model is a sweep too: `--capture text` (or `logprobs`) with an engine
    that returns no ids, or a hosted API (`--upstream anthropic|google|openai-responses|hf
    --upstream-key-file KEY`, no --llm-url needed), writes the same dataset with
    `capture_level` and `trainable: false` on every row, and resumes the same way. The
    key goes to the capture proxies only (on every node), never to a sandbox, a log or
    the dataset; an upstream's 429 with Retry-After is retried by the proxy
    (counts.retried_calls) instead of failing rows (docs/evaluation.md).

    Exit code 0: every rollout ok; 1: some rollouts failed (see the tables);
    2: could not start (bad flags, engine refused, sandbox unusable); 130: stopped by
    Ctrl-C or SIGTERM (no rollout starts after it, the running ones are cancelled and
    their sandboxes torn down).
    """
    from harbor_ray.cluster.progress import live_progress, print_summary
    from harbor_ray.jobs.sweep import SweepRequest, check_sweep, checked_ingress, started_sweep
    from harbor_ray.trials.backends import parse_sandbox_args

    request = SweepRequest(
        agent=agent,
        dataset=dataset,
        tasks=task,
        llm_url=llm_url,
        engine=engine,
        model=model,
        sandbox=sandbox,
        sandbox_kwargs=parse_sandbox_args(sandbox_arg or []),
        attempts=n,
        budget=budget,
        deadline_s=deadline,
        temperature=temperature,
        max_tokens=max_tokens,
        reward_key=reward_key,
        name=name,
        out=out.resolve(),
        ray_address=ray_address,
        proxy_replicas=proxy_replicas,
        commit_every_s=commit_every_s,
        ingress=checked_ingress(ingress),
        engine_timeout_s=engine_timeout,
        proxy_url=proxy_url,
        proxy_bind=proxy_bind,
        agents_cache=agents_cache,
        stitch=stitch,
        engine_kind=engine_kind,
        host_userland=host_userland,
        capture=capture,
        upstream=upstream,
        upstream_key_file=upstream_key_file,
        **fleet,
    )
    checked = check_sweep(request, opt.notice)  # before the log: a refusal leaves nothing
    opt.evaluation_notice(capture)
    with command_output(log_file or request.out / LOG_NAME, verbose=verbose) as terminal:
        with (
            started_sweep(request, progress=phases_of(terminal), checked=checked) as started,
            _view_beside(request.out, view_port) if view else contextlib.nullcontext(),
            live_progress(console) as on_stats,
        ):
            stats = started.run(on_stats)
        print_summary(stats, request.out, console)
        _report_after_sweep(request.out)
        show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if stats.failed == 0 else Exit.SOME_FAILED)


@contextlib.contextmanager
def _view_beside(out: Path, port: int) -> Iterator[None]:
    from harbor_ray.report.live import view_in_thread

    with view_in_thread(out, port=port) as url:
        console.print(f"view: [bold]{url}[/bold] (live report and trace viewer)")
        yield


def _report_after_sweep(out: Path) -> None:
    """Write OUT/report.html. A report that fails costs the report, not the sweep's
    exit code: the rows are committed already, and `harbor-ray report` can retry."""
    from harbor_ray.report import write_report

    try:
        console.print(f"report: {write_report(out)}")
    except Exception as exc:  # a bug in the report must not hide the sweep's outcome
        console.print(f"[red]report failed:[/red] {type(exc).__name__}: {exc}")
