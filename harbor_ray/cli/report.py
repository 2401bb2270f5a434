"""`harbor-ray report` and `harbor-ray view`: a dataset's report, as a file or live;
`harbor-ray compare`: datasets side by side."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Literal

import typer

from harbor_ray.cli.options import TokenizerOption, console
from harbor_ray.errors import NotADatasetError

PassRewardOption = Annotated[
    float,
    typer.Option(
        help="A rollout passes (for pass@k) when its reward is at least this; no reward "
        "never passes."
    ),
]


def report(
    out: Annotated[
        Path,
        typer.Argument(
            help="A dataset directory (a sweep's --out: rollouts/, sequences/, turns/)."
        ),
    ],
    dest: Annotated[
        Path | None,
        typer.Option("--to", help="Where to write the page (default: OUT/report.html)."),
    ] = None,
    pass_reward: PassRewardOption = 1.0,
    tokenizer: TokenizerOption = None,
) -> None:
    """Write a dataset's report: one self-contained HTML file (no server, no network).

    Plots: reward by task, pass@k by task, error types, findings by code,
    turns and sampled tokens per rollout, time by trial phase, engine tokens/s
    and calls in flight over time; for online datasets (policy_version_*
    columns) reward and staleness by policy version.

    Then a trace viewer: filter rollouts by task, ok, error type and reward;
    pick one to see its findings, its rollout graph (roots, forks, discarded
    retries, auxiliary calls), each turn's messages, and its tokens: every
    sampled id shown as its text (decoded with the served model's tokenizer,
    or --tokenizer; a toggle shows the ids) and coloured by its logprob,
    with its loss mask.

    Only committed rows are read: safe on a dataset a sweep is writing
    (`harbor-ray view` follows one as it grows). To put several runs side
    by side (a base model against a trained checkpoint), use `harbor-ray
    compare`.
    """
    from harbor_ray.report import write_report

    if not (out / "rollouts").is_dir():
        raise NotADatasetError(f"{out} is not a dataset (no rollouts/ in it)")
    page = write_report(out, dest, pass_reward=pass_reward, tokenizer=tokenizer)
    console.print(f"report: {page}")


def view(
    out: Annotated[
        Path, typer.Argument(help="A dataset directory; it may be empty or still being written.")
    ],
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind. The page shows the rollouts' messages: bind beyond "
            "loopback only if everyone who can reach it may read them."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8766,
    poll: Annotated[
        float, typer.Option(min=0.1, help="Seconds between the page's checks for new rows.")
    ] = 2.0,
    pass_reward: PassRewardOption = 1.0,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A Host name the viewer answers besides the loopback names and --host "
            "(repeatable; '*' for any): the name others reach it by. Requests naming "
            "any other get 421, so a web page cannot read it through DNS rebinding."
        ),
    ] = None,
    tokenizer: TokenizerOption = None,
) -> None:
    """Serve the report and trace viewer of OUT on loopback, live.

    The page is `harbor-ray report`'s: it checks the dataset every --poll
    seconds and redraws when a commit landed (during a sweep or an online
    run), keeping the filters and the open rollout. `harbor-ray sweep --view`
    starts it beside a sweep.
    """
    from harbor_ray.report.live import serve_view

    out.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it stops
        serve_view(
            out,
            host=host,
            port=port,
            poll_s=poll,
            pass_reward=pass_reward,
            allowed_hosts=allowed_host or (),
            tokenizer=tokenizer,
            on_ready=lambda url: console.print(f"view of {out} at [bold]{url}[/bold]"),
        )


def compare(
    outs: Annotated[
        list[Path],
        typer.Argument(
            metavar="OUT",
            help="Two or more dataset directories (sweeps' --out); the first is the "
            "baseline every other is measured against.",
        ),
    ],
    label: Annotated[
        list[str] | None,
        typer.Option(
            help="A name for each dataset, in order (repeat it once per dataset); default: "
            "the model each one's rows name."
        ),
    ] = None,
    form: Annotated[
        Literal["html", "json", "md"],
        typer.Option(
            "--format",
            help="html: one self-contained page (no server, no network); json: "
            "every figure at full precision, for CI; md: the tables, for "
            "papers and pull requests.",
        ),
    ] = "html",
    dest: Annotated[
        Path | None,
        typer.Option(
            "--to",
            help="Where to write it (default: compare.html for html, the standard "
            "output for json and md).",
        ),
    ] = None,
    pass_reward: PassRewardOption = 1.0,
) -> None:
    """Compare runs on the same tasks: did training help, and where?

    Per run: pass rate over its rollouts with a 95% Wilson interval, pass@k
    (unbiased, k up to the attempts) averaged over tasks with a 95%
    Student-t interval, turns and sampled tokens per rollout, error types.
    Each run against the baseline (the first): its pass@k minus the
    baseline's, paired task by task with a 95% interval (one that crosses 0
    is no clear difference), and the tasks it solves that the baseline does
    not, and the reverse.

    Only the tasks every dataset holds are compared; the others are named,
    never averaged in. Attempts that differ, rollouts without a reward
    (counted as not passing) and settings that differ (agent, temperature,
    ...) are said in notes at the top. The Provenance table shows what each
    run's rows say made them (weights, tokenizer, chat template, harness);
    a tokenizer, template or harness that differs is warned of in a note
    (not refused: comparing other models is what this is for).

    Example: harbor-ray compare base/ trained/ --format md
    """
    from harbor_ray.report.compare import compare_datasets, render_comparison, write_comparison

    comparison = compare_datasets(outs, labels=label or (), pass_reward=pass_reward)
    if dest is None and form != "html":
        print(render_comparison(comparison, form), end="")
        return
    path = write_comparison(comparison, form, dest or Path("compare.html"))
    console.print(f"comparison: {path}")
