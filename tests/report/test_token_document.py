"""The report document's token text: the pieces of the ids it shows, with a tokenizer
found on this machine or given; without one, a note and no pieces."""

from __future__ import annotations

import json
from pathlib import Path

from harbor_ray.report import report_document, write_report
from harbor_ray.report.tokenizer import Tokenizers
from tests.data.rollouts import rich_session, rollout
from tests.report.datasets import byte_level_tokenizer, worded_rollout, write_dataset

REPLIES = ["hé 🤖\n", "done<|end|>"]


def test_the_served_models_tokenizer_gives_each_distinct_id_a_piece(tmp_path: Path) -> None:
    tokenizer = byte_level_tokenizer(tmp_path / "tok")
    # The rows name the model by its directory: found there, nothing passed.
    out = write_dataset(
        tmp_path / "out", [worded_rollout("a1", str(tokenizer), tokenizer, REPLIES)]
    )
    document = json.loads(report_document(out))
    tokens = document["tokens"]
    assert tokens["model"] == str(tokenizer) and tokens["tokenizer"] == str(tokenizer)
    turns = document["traces"]["a1"]["turns"]
    ids = {i for t in turns for i in [*t["token_ids"], *t["prompt_delta"]]}
    assert set(map(int, tokens["pieces"])) == ids  # one entry per distinct id, no more
    assert ["s", "<|end|>"] in tokens["pieces"].values()
    assert ["t", "é"] in tokens["pieces"].values()
    assert ["b", "f0"] in tokens["pieces"].values()  # the emoji's first byte, alone
    # The ids stay the record: the turns carry ids, never text.
    assert turns[0]["token_ids"] == [71, 256, 220, 172, 253, 97, 244, 198]


def test_a_given_tokenizer_serves_rows_of_any_model_name(tmp_path: Path) -> None:
    tokenizer = byte_level_tokenizer(tmp_path / "tok")
    out = write_dataset(tmp_path / "out", [worded_rollout("a1", "served-name", tokenizer, REPLIES)])
    document = json.loads(report_document(out, tokenizers=Tokenizers(str(tokenizer))))
    assert document["tokens"]["model"] == "served-name"
    assert document["tokens"]["pieces"]
    page = write_report(out, tokenizer=str(tokenizer)).read_text()
    assert "HarborTokens" in page  # the token view's script is inline


def test_without_a_tokenizer_the_document_says_so_and_keeps_ids(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", [rollout("a1", rich_session())])
    tokens = json.loads(report_document(out))["tokens"]
    assert tokens["tokenizer"] is None and tokens["pieces"] == {}
    assert tokens["note"].startswith("no tokenizer for test-model: showing ids; pass --tokenizer")
