"""`harbor-ray qualify`: agent CLIs qualified end to end, one line per agent and task."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import harbor_ray.cli.options as opt
from harbor_ray.cli.options import LOG_NAME, Exit, command_output, console, phases_of, show_log

if TYPE_CHECKING:
    from harbor_ray.qualify.report import QualifyRow


def qualify(
    agents: Annotated[
        list[str] | None,
        typer.Argument(
            help="Agents to qualify (default: every qualified agent installed here: the "
            "pinned CLIs of `harbor-ray agents list`, and terminus-2)."
        ),
    ] = None,
    profile: Annotated[
        list[str] | None,
        typer.Option(
            help="The profile (dialect) each agent speaks to the proxy: openai-chat, "
            "openai-responses, anthropic or google (repeatable; default: each agent's "
            "own; `all`: every profile it is wired for). An agent not wired for a "
            "profile asked for is refused (exit 2), its profiles named."
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="`scripted` (level 1: a scripted engine that solves each task by its "
            "solution commands, through each agent's own tools), or a Serve YAML to "
            "start a real engine for the run (level 2, e.g. "
            "serve_configs/engine_cpu.yaml)."
        ),
    ] = "scripted",
    llm_url: Annotated[
        str | None,
        typer.Option(help="Level 2 against an engine already running (instead of --engine)."),
    ] = None,
    model: opt.ModelOption = None,
    engine_kind: opt.EngineKindOption = "auto",
    task: Annotated[
        list[str] | None,
        typer.Option(help="Sample tasks to run (repeatable; default: hello-file)."),
    ] = None,
    dataset: Annotated[
        str, typer.Option(help="Where the tasks come from (as `rollout --dataset`).")
    ] = "samples",
    budget: opt.BudgetOption = 20,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Cap on tokens sampled per model call (level 2; default 256)."),
    ] = None,
    deadline: Annotated[
        float, typer.Option(help="Seconds one agent may take on one task.")
    ] = 600.0,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Rollouts at once (each with a proxy of its own).")
    ] = 1,
    out: Annotated[
        Path,
        typer.Option(
            help="Directory for the report (qualification-<level>.json and .md), trials/ and logs/."
        ),
    ] = Path("qualify"),
    agents_cache: opt.AgentsCacheOption = None,
    sandbox: Annotated[
        str,
        typer.Option(
            help="`local` (the host's userland) or `container` (each task's own image, "
            "built with Docker; the agent CLIs from the cache are mounted in)."
        ),
    ] = "local",
    sandbox_arg: opt.SandboxArgOption = None,
    log_file: Annotated[Path | None, opt.log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: opt.VerboseOption = False,
) -> None:
    """Qualify agent CLIs end to end: each one runs each task in harbor_ray's sandbox
    (--sandbox) through the capture proxy, and a versioned report is written under OUT.

    Level 1 (`--engine scripted`, the default): the engine plays a model that calls
    the agent's shell tool with the task's solution/solve.sh and then answers; an agent
    qualifies with reward 1.0, one agent root (side calls apart), no retokenization
    split, the stored ids exactly the engine's and no 4xx from the proxy. Level 2
    (`--llm-url URL`, or `--engine YAML`): the real model; an agent qualifies with at
    least one captured turn and no infrastructure error (the reward may be 0).

    Exit code 0: every row qualified; 1: some did not (the table says why);
    2: could not start; 130: stopped by Ctrl-C or SIGTERM (no rollout starts after it,
    the running ones are cancelled and their sandboxes torn down).
    """
    from harbor_ray.jobs.qualification import QualifyRequest, plan_qualify, run_qualify
    from harbor_ray.qualify.report import render_markdown
    from harbor_ray.qualify.run import report_paths
    from harbor_ray.trials.backends import parse_sandbox_args

    request = QualifyRequest(
        agents=tuple(agents or ()),
        profiles=tuple(profile or ()),
        engine=engine,
        llm_url=llm_url,
        model=model,
        engine_kind=engine_kind,
        tasks=tuple(task or QualifyRequest.tasks),
        dataset=dataset,
        budget=budget,
        max_tokens=max_tokens,
        deadline_s=deadline,
        concurrency=concurrency,
        out=out.resolve(),
        agents_cache=agents_cache,
        sandbox=sandbox,
        sandbox_kwargs=parse_sandbox_args(sandbox_arg or []),
    )
    plan = plan_qualify(request, opt.notice)  # before the log: a refusal leaves nothing
    with command_output(log_file or request.out / LOG_NAME, verbose=verbose) as terminal:
        report = run_qualify(request, progress=phases_of(terminal), on_row=_shown, plan=plan)
        print(render_markdown(report), file=terminal.out)
        console.print(f"report: {' and '.join(map(str, report_paths(request.out, request.level)))}")
        show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if report.qualified else Exit.SOME_FAILED)


def _shown(row: QualifyRow) -> None:
    mark = "[green]qualified[/green]" if row.qualified else "[red]not qualified[/red]"
    console.print(
        f"{row.agent} ({row.profile or '-'}) on {row.task}: {mark} ({row.turns} turns, "
        f"{row.seconds:.0f} s){'' if row.qualified else ': '}"
        f"{'; '.join(row.why)}"
    )
