"""`harbor-ray rollout`: rollouts end to end in this process, with a results table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import harbor_ray.cli.options as opt
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cli.options import LOG_NAME, Exit, command_output, console, phases_of, show_log

if TYPE_CHECKING:
    from harbor_ray.data.result import RolloutResult


def rollout(
    agent: Annotated[
        str, typer.Option(help="Agent name (see `harbor-ray info`), e.g. terminus-2, oracle, nop.")
    ],
    dataset: Annotated[
        str,
        typer.Option(
            help="Task dir, dir of task dirs, REGISTRY.json:NAME[@VERSION], or `samples` "
            "(the bundled sample tasks)."
        ),
    ] = "samples",
    task: opt.TaskOption = None,
    llm_url: opt.LlmUrlOption = None,
    engine: Annotated[
        Path | None,
        typer.Option(
            help="Instead of --llm-url: start the engine from this Serve YAML on a local Ray "
            "for the run (e.g. serve_configs/engine_cpu.yaml), and stop it after."
        ),
    ] = None,
    model: opt.ModelOption = None,
    sandbox: opt.SandboxOption = "local",
    sandbox_arg: opt.SandboxArgOption = None,
    n: opt.AttemptsOption = 1,
    concurrency: Annotated[int, typer.Option(help="Rollouts at once.")] = 1,
    budget: opt.BudgetOption = 20,
    deadline: Annotated[
        float | None, typer.Option(help="Seconds a rollout may take in all before it is cancelled.")
    ] = 900.0,
    temperature: opt.TemperatureOption = None,
    max_tokens: opt.MaxTokensOption = None,
    reward_key: opt.RewardKeyOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Directory for results.jsonl (a rollout per line: its row, and the capture's "
            "export document under `capture`), engine.json (the engine's certification) "
            "and trials/."
        ),
    ] = None,
    engine_timeout: opt.EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    log_file: Annotated[Path | None, opt.log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: opt.VerboseOption = False,
    agents_cache: opt.AgentsCacheOption = None,
    stitch: opt.StitchOption = True,
    capture: opt.CaptureOption = "tokens",
    engine_kind: opt.EngineKindOption = "auto",
    upstream: opt.UpstreamOption = "openai-chat",
    upstream_key_file: opt.UpstreamKeyFileOption = None,
    host_userland: opt.HostUserlandOption = False,
) -> None:
    """Run rollouts end to end in this process: no Ray, no server.

    Exit code 0: every rollout ok; 1: some rollouts failed (see the table);
    2: could not start (bad flags, engine refused, sandbox unusable); 130: stopped by
    Ctrl-C or SIGTERM (no rollout starts after it, the running ones are cancelled and
    their sandboxes torn down).
    """
    from harbor_ray.jobs.rollouts import RolloutRequest, check_rollouts, run_rollouts
    from harbor_ray.trials.backends import parse_sandbox_args

    request = RolloutRequest(
        agent=agent,
        dataset=dataset,
        tasks=task,
        llm_url=llm_url,
        engine=engine,
        model=model,
        sandbox=sandbox,
        sandbox_kwargs=parse_sandbox_args(sandbox_arg or []),
        attempts=n,
        concurrency=concurrency,
        budget=budget,
        deadline_s=deadline,
        temperature=temperature,
        max_tokens=max_tokens,
        reward_key=reward_key,
        out=(out or RolloutRequest.out).resolve(),
        engine_timeout_s=engine_timeout,
        agents_cache=agents_cache,
        stitch=stitch,
        capture=capture,
        engine_kind=engine_kind,
        upstream=upstream,
        upstream_key_file=upstream_key_file,
        host_userland=host_userland,
    )
    checked = check_rollouts(request, opt.notice)  # before the log: a refusal leaves nothing
    opt.evaluation_notice(capture)
    with (
        command_output(log_file or request.out / LOG_NAME, verbose=verbose) as terminal,
        Progress(console=console) as progress,
    ):
        bar = progress.add_task("rollouts", total=None)
        records = run_rollouts(
            request,
            progress=phases_of(terminal),
            on_planned=lambda total: progress.update(bar, total=total),
            on_result=lambda _: progress.advance(bar),
            checked=checked,
        )
        progress.stop()
        results = [r.result for r in records]
        print_results(results, Console(file=terminal.out))
        console.print(f"results: {request.results_path}")
        show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if all(r.ok for r in results) else Exit.SOME_FAILED)


def print_results(results: Sequence[RolloutResult], out: Console) -> None:
    table = Table(title="rollouts")
    for column in ("task", "attempt", "ok", "reward", "error", "model calls", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.task,
            str(r.attempt),
            "yes" if r.ok else "[red]no[/red]",
            "-" if r.reward is None else f"{r.reward:g}",
            r.error_type.value if r.error_type else "",
            str(r.model_calls),
            f"{r.timings.get('total', 0):.1f}",
        )
    out.print(table)
    for r in results:
        if r.error:
            console.print(f"[dim]{r.task}#{r.attempt}: {r.error}[/dim]")
