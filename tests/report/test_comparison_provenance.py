"""A comparison states where its runs' provenance differs (datasets written by the real
writer): every field side by side, a note for each that is not the weights, a run whose
rows disagree among themselves, and a dataset written before version 9 as unknown."""

from __future__ import annotations

import json
from pathlib import Path

from harbor_ray.data.result import Provenance
from harbor_ray.report.compare import compare_datasets, render_comparison
from tests.data.rollouts import chain, rollout
from tests.report.datasets import write_dataset

BASE = Provenance(
    model_source="/models/base",
    weights_sha256="a" * 64,
    chat_template_sha256="c" * 64,
    tokenizer_sha256="d" * 64,
    harness_version="harbor 0.25.0",
    harness_config_sha256="e" * 64,
)


def _dataset(root: Path, name: str, *provenances: Provenance | None) -> Path:
    """One rollout of tasks `t` and `u` per provenance given."""
    return write_dataset(
        root / name,
        [
            rollout(f"{t}__{i}__{name}", chain(2), task=t, attempt=i, model="m", provenance=p)
            for t in "tu"
            for i, p in enumerate(provenances)
        ],
    )


def test_a_checkpoint_of_the_same_model_is_like_with_like(tmp_path: Path) -> None:
    step = BASE.model_copy(update={"model_source": "/models/step-40", "weights_sha256": "b" * 64})
    comparison = compare_datasets(
        [_dataset(tmp_path, "base", BASE, BASE), _dataset(tmp_path, "step", step, step)]
    )
    rows = {row.field: row for row in comparison.provenance}
    assert [rows[f].differs for f in rows] == [True, True, False, False, False, False]
    assert rows["weights_sha256"].values == [["a" * 64], ["b" * 64]]
    assert comparison.notes == []  # the weights are what it compares: nothing to warn


def test_another_tokenizer_or_harness_config_is_said(tmp_path: Path) -> None:
    other = BASE.model_copy(
        update={"tokenizer_sha256": "f" * 64, "harness_config_sha256": "9" * 64}
    )
    comparison = compare_datasets(
        [_dataset(tmp_path, "base", BASE), _dataset(tmp_path, "other", other)], labels=["A", "B"]
    )
    assert (
        "not like with like: tokenizer_sha256 differs (A dddddddddddd; B ffffffffffff): "
        "the differences measure it too, not the weights alone"
    ) in comparison.notes
    assert any(
        n.startswith("not like with like: harness_config_sha256 differs") for n in comparison.notes
    )
    document = json.loads(render_comparison(comparison, "json"))
    by_field = {row["field"]: row for row in document["provenance"]}
    assert by_field["tokenizer_sha256"] == {
        "field": "tokenizer_sha256",
        "differs": True,
        "values": [["d" * 64], ["f" * 64]],
    }
    text = render_comparison(comparison, "md")
    assert "## Provenance" in text
    assert "| tokenizer_sha256 | dddddddddddd | ffffffffffff | yes |" in text
    assert "table-provenance" in render_comparison(comparison, "html")


def test_mixed_rows_and_an_old_dataset_are_said(tmp_path: Path) -> None:
    resumed = BASE.model_copy(update={"chat_template_sha256": "0" * 64})
    comparison = compare_datasets(
        [_dataset(tmp_path, "old", None), _dataset(tmp_path, "mixed", BASE, resumed)],
        labels=["old", "mixed"],
    )
    rows = {row.field: row for row in comparison.provenance}
    assert rows["model_source"].values == [[None], ["/models/base"]]
    assert (
        "mixed: its rows differ in chat_template_sha256 (000000000000, cccccccccccc)"
        in comparison.notes
    )
    assert any(
        n.startswith("not like with like: tokenizer_sha256 differs (old unknown;")
        for n in comparison.notes
    )
