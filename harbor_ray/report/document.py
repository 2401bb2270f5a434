"""The report document: every plot and trace of a dataset as one JSON value: pure.

The page (page.py) embeds it whole, and the live view (live.py) serves it as
`data.json` so an open page redraws without a reload. Plotly figures are serialised by
plotly itself (its own JSON encoder), the rest by orjson.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import plotly.io as pio
import pyarrow as pa

from harbor_ray.report.figures import plots
from harbor_ray.report.tables import DatasetTables
from harbor_ray.report.traces import TOKEN_TEXT_NOTE, summaries, traces

__all__ = ["MANIFEST_FIELDS", "environments", "report_json"]

# What the page's header shows of the manifest (the rest is the run's full config).
MANIFEST_FIELDS = ("run", "agent", "sandbox", "dataset", "attempts", "started_at", "ended_at")


def environments(rollouts: pa.Table) -> dict[str, int]:
    """Rollouts by where their trial ran (`image`, `host`, `host_override`; `unknown`
    when no sandbox started, or in a dataset older than schema version 7)."""
    column = (
        rollouts["environment"].to_pylist()
        if "environment" in rollouts.column_names
        else [None] * rollouts.num_rows
    )
    return dict(Counter(value or "unknown" for value in column))


def report_json(
    tables: DatasetTables,
    *,
    source: str,
    version: str,
    pass_reward: float = 1.0,
    tokens: dict[str, Any] | None = None,
) -> bytes:
    """The document of `tables`, read from `source` (shown as the title) at `version`.

    `tokens`: the token text section (tokenizer.token_section), shown by tokens.js;
    None: no tokenizer was looked for, and the viewer shows ids."""
    rollouts = tables.rollouts
    rewards = [r for r in rollouts["reward"].to_pylist() if r is not None]
    engine = tables.manifest.get("engine") or {}
    document: dict[str, Any] = {
        "source": source,
        "version": version,
        "manifest": {k: tables.manifest.get(k) for k in MANIFEST_FIELDS},
        "model": engine.get("served_model"),
        "totals": {
            "rollouts": rollouts.num_rows,
            "ok": sum(rollouts["ok"].to_pylist()),
            "rewarded": len(rewards),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "turns": tables.turns.num_rows,
            "environments": environments(rollouts),
        },
        "plots": [
            {
                "id": p.id,
                "title": p.title,
                "caption": p.caption,
                "figure": orjson.Fragment(pio.to_json(p.figure, validate=False)),
            }
            for p in plots(tables, pass_reward=pass_reward)
        ],
        "rollouts": summaries(rollouts),
        "traces": traces(tables),
        "notes": {"token_text": TOKEN_TEXT_NOTE},
        "tokens": tokens,
    }
    return orjson.dumps(document)
