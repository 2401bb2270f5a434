"""The report's plots, from a dataset's tables: pure (Arrow in, plotly figures out).

Each plot says what it counts in its caption. Null stays unknown, never zero: a rollout
without a reward is left out of the reward plots (and counted in the caption), one
without a capture out of the turn and token counts.

Policy versions: rollouts/ carries nullable `policy_version_min`/`_max` (schema 2). A
rollout's version is the oldest of its values (the oldest weights that sampled any of
its tokens) and its staleness the newest minus the oldest (weight updates while it ran).
Offline sweeps record version 0 throughout, so the policy plot appears only when some
rollout was sampled by a later version: an online run that updated its weights.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc
from plotly.subplots import make_subplots

from harbor_ray.report.stats import pass_at_k
from harbor_ray.report.tables import DatasetTables, policy_columns

__all__ = ["LAYOUT", "Plot", "plots"]

NO_ERROR = "none (ok or failed without an error)"
LAYOUT = {"margin": {"l": 60, "r": 20, "t": 50, "b": 60}, "height": 380, "template": "plotly_white"}


@dataclass(frozen=True)
class Plot:
    """One plot of the report: a stable id (the page's element id), a title, what it
    shows in words, and the figure."""

    id: str
    title: str
    caption: str
    figure: go.Figure


def plots(tables: DatasetTables, *, pass_reward: float = 1.0) -> list[Plot]:
    """Every plot the dataset supports, in page order."""
    rollouts = tables.rollouts
    found = [
        _reward_by_task(rollouts),
        _pass_at_k(rollouts, pass_reward),
        _error_types(rollouts),
        _findings(rollouts),
        _turns_and_tokens(rollouts, tables.turns),
        _phase_times(rollouts),
        _engine_over_time(tables.turns),
    ]
    if _weights_changed(rollouts):
        found.append(_policy(rollouts))
    return found


def _figure(**layout: object) -> go.Figure:
    return go.Figure(layout={**LAYOUT, **layout})


def _empty(figure: go.Figure, what: str) -> go.Figure:
    figure.add_annotation(
        text=f"no {what} in this dataset",
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 16},
    )
    return figure


def _reward_by_task(rollouts: pa.Table) -> Plot:
    tasks = rollouts["task"].to_pylist()
    rewards = rollouts["reward"].to_pylist()
    by_task: dict[str, list[float]] = defaultdict(list)
    for task, reward in zip(tasks, rewards, strict=True):
        if reward is not None:
            by_task[task].append(reward)
    figure = _figure(xaxis_title="task", yaxis_title="reward", showlegend=False)
    for task in sorted(by_task):
        figure.add_trace(
            go.Box(y=by_task[task], name=task, boxpoints="all", jitter=0.4, pointpos=0)
        )
    missing = rewards.count(None)
    caption = (
        f"Each point a rollout's reward, by task ({len(rewards) - missing} rewards; "
        f"{missing} rollouts without one are left out: unknown, not 0)."
    )
    return Plot(
        "reward-by-task",
        "Reward by task",
        caption,
        figure if by_task else _empty(figure, "rewards"),
    )


def _pass_at_k(rollouts: pa.Table, pass_reward: float) -> Plot:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # task -> [n, passes]
    for task, reward in zip(
        rollouts["task"].to_pylist(), rollouts["reward"].to_pylist(), strict=True
    ):
        counts[task][0] += 1
        counts[task][1] += reward is not None and reward >= pass_reward
    figure = _figure(
        xaxis_title="k (rollouts drawn)",
        yaxis_title="pass@k",
        yaxis_range=[-0.05, 1.05],
        xaxis_dtick=1,
    )
    for task in sorted(counts):
        n, c = counts[task]
        ks = list(range(1, n + 1))
        figure.add_trace(
            go.Scatter(x=ks, y=[pass_at_k(n, c, k) for k in ks], name=task, mode="lines+markers")
        )
    caption = (
        f"Unbiased pass@k per task for k up to its rollouts; a rollout passes when "
        f"its reward is at least {pass_reward:g} (no reward: does not pass)."
    )
    return Plot(
        "pass-at-k", "pass@k by task", caption, figure if counts else _empty(figure, "rollouts")
    )


def _error_types(rollouts: pa.Table) -> Plot:
    errors = Counter(e if e is not None else NO_ERROR for e in rollouts["error_type"].to_pylist())
    ordered = errors.most_common()
    figure = _figure(xaxis_title="error type", yaxis_title="rollouts", showlegend=False)
    figure.add_trace(go.Bar(x=[e for e, _ in ordered], y=[n for _, n in ordered]))
    caption = (
        f"Rollouts by where they failed ({len(rollouts)} rollouts, "
        f"{sum(rollouts['ok'].to_pylist())} ok)."
    )
    return Plot(
        "error-types", "Error types", caption, figure if ordered else _empty(figure, "rollouts")
    )


def _findings(rollouts: pa.Table) -> Plot:
    by_severity: dict[str, Counter[str]] = defaultdict(Counter)
    for findings in rollouts["findings"].to_pylist():
        for finding in findings:
            by_severity[finding["severity"]][finding["code"]] += 1
    figure = _figure(xaxis_title="finding code", yaxis_title="findings", barmode="stack")
    for severity in sorted(by_severity):
        codes = sorted(by_severity[severity])
        figure.add_trace(
            go.Bar(x=codes, y=[by_severity[severity][c] for c in codes], name=severity)
        )
    caption = (
        "Findings of every rollout by code, stacked by severity (fatal makes a rollout not ok)."
    )
    return Plot(
        "findings",
        "Findings by code",
        caption,
        figure if by_severity else _empty(figure, "findings"),
    )


def _sampled_per_rollout(rollouts: pa.Table, turns: pa.Table) -> list[int]:
    """Sampled tokens of each rollout that has a capture (counts.turns not null)."""
    sampled: Counter[str] = Counter()
    lengths = pc.fill_null(pc.list_value_length(turns["token_ids"]), 0).to_pylist()
    for rollout_id, length in zip(turns["rollout_id"].to_pylist(), lengths, strict=True):
        sampled[rollout_id] += length
    captured = pc.is_valid(pc.struct_field(rollouts["counts"], "turns")).to_pylist()
    return [
        sampled[r]
        for r, has in zip(rollouts["rollout_id"].to_pylist(), captured, strict=True)
        if has
    ]


def _turns_and_tokens(rollouts: pa.Table, turns: pa.Table) -> Plot:
    counts = [t for t in pc.struct_field(rollouts["counts"], "turns").to_pylist() if t is not None]
    sampled = _sampled_per_rollout(rollouts, turns)
    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("turns per rollout", "sampled tokens per rollout")
    )
    figure.update_layout(**LAYOUT, showlegend=False)
    figure.add_trace(go.Histogram(x=counts, name="turns"), row=1, col=1)
    figure.add_trace(go.Histogram(x=sampled, name="sampled tokens"), row=1, col=2)
    figure.update_yaxes(title_text="rollouts", row=1, col=1)
    caption = (
        f"Recorded turns and engine-sampled tokens per rollout, over the "
        f"{len(counts)} rollouts with a capture."
    )
    return Plot(
        "turns-tokens",
        "Turns and sampled tokens per rollout",
        caption,
        figure if counts else _empty(figure, "captured rollouts"),
    )


def _phase_times(rollouts: pa.Table) -> Plot:
    by_phase: dict[str, list[float]] = defaultdict(list)
    for timings in rollouts["timings"].to_pylist():
        for phase, seconds in timings:
            by_phase[phase].append(seconds)
    figure = _figure(xaxis_title="trial phase", yaxis_title="seconds", showlegend=False)
    for phase in sorted(by_phase):
        figure.add_trace(go.Box(y=by_phase[phase], name=phase, boxpoints="outliers"))
    caption = "Seconds per trial phase, one sample per rollout that reported the phase."
    return Plot(
        "phase-times",
        "Time by trial phase",
        caption,
        figure if by_phase else _empty(figure, "timings"),
    )


def _engine_over_time(turns: pa.Table) -> Plot:
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.update_layout(**LAYOUT, xaxis_title="seconds since the first call")
    caption = (
        "Engine throughput as the proxy recorded it: sampled tokens per second "
        "(a call's tokens counted when it ended) and model calls in flight, "
        "from every turn's start and end."
    )
    if turns.num_rows == 0:
        return Plot(
            "engine-over-time",
            "Engine tokens/s and calls over time",
            caption,
            _empty(figure, "model calls"),
        )
    started = turns["started_at"].to_numpy()
    ended = turns["ended_at"].to_numpy()
    tokens = pc.fill_null(pc.list_value_length(turns["token_ids"]), 0).to_numpy()
    origin, span = started.min(), max(ended.max() - started.min(), 1e-9)
    width = max(span / 60, 1.0) if span > 1.0 else span / 10
    edges = np.arange(0.0, span + width, width)
    per_bin = np.histogram(ended - origin, bins=edges, weights=tokens)[0]
    in_flight = np.searchsorted(np.sort(started - origin), edges, side="right") - np.searchsorted(
        np.sort(ended - origin), edges, side="right"
    )
    figure.add_trace(
        go.Scatter(
            x=edges[:-1] + width / 2, y=per_bin / width, name="sampled tokens/s", mode="lines"
        ),
        secondary_y=False,
    )
    figure.add_trace(
        go.Scatter(x=edges, y=in_flight, name="calls in flight", line_shape="hv"), secondary_y=True
    )
    figure.update_yaxes(title_text="tokens/s", secondary_y=False)
    figure.update_yaxes(title_text="calls in flight", secondary_y=True)
    return Plot("engine-over-time", "Engine tokens/s and calls over time", caption, figure)


def _weights_changed(rollouts: pa.Table) -> bool:
    return any(v for c in policy_columns(rollouts) for v in rollouts[c].to_pylist())


def _policy(rollouts: pa.Table) -> Plot:
    columns = policy_columns(rollouts)
    values = [rollouts[c].to_pylist() for c in columns]
    rewards = rollouts["reward"].to_pylist()
    by_version: dict[int, tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    for row, reward in enumerate(rewards):
        known = [v[row] for v in values if v[row] is not None]
        if not known:
            continue
        reward_list, staleness = by_version[min(known)]
        staleness.append(max(known) - min(known))
        if reward is not None:
            reward_list.append(reward)
    figure = make_subplots(rows=1, cols=2, subplot_titles=("reward", "staleness (versions)"))
    figure.update_layout(**LAYOUT, showlegend=False)
    for version in sorted(by_version):
        reward_list, staleness = by_version[version]
        figure.add_trace(
            go.Box(y=reward_list, name=str(version), boxpoints="all", marker_color="#1f77b4"),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Box(y=staleness, name=str(version), boxpoints="all", marker_color="#ff7f0e"),
            row=1,
            col=2,
        )
    figure.update_xaxes(title_text="policy version (oldest of the rollout's)")
    caption = (
        f"By the oldest policy version that sampled the rollout (columns: "
        f"{', '.join(columns)}); staleness is its newest minus its oldest version."
    )
    return Plot(
        "policy",
        "Reward and staleness by policy version",
        caption,
        figure if by_version else _empty(figure, "policy versions"),
    )
