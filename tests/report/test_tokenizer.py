"""The local tokenizer read as a vocab: a byte-level one made here, and the default
model's own (SmolLM2's, from the prepared default model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from harbor_ray.engine.model import DEFAULT_MODEL_ID, default_model_dir
from harbor_ray.errors import ModelUnavailableError, ReportError
from harbor_ray.report.token_text import piece_texts, pieces_table
from harbor_ray.report.tokenizer import Tokenizers, find_tokenizer, token_section
from tests.report.datasets import byte_level_tokenizer

TEXT = "héllo wörld \u2019quote\u2019 🤖 emoji\n\tindent  done"


@pytest.fixture(scope="module")
def default_tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """The default model's directory: the one on this machine when prepared, else one
    prepared for the session (as the engine tests do)."""
    try:
        prepared = default_model_dir()
    except ModelUnavailableError:
        prepared = None
    if prepared is not None and (prepared / "tokenizer.json").is_file():
        return prepared
    return request.getfixturevalue("prepared_model_dir")


def _round_trip(directory: Path) -> None:
    found = find_tokenizer("m", str(directory))
    assert found.vocab is not None and found.source == str(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ids = tokenizer.encode(TEXT).ids
    special = tokenizer.token_to_id("<|im_end|>") or tokenizer.token_to_id("<|end|>")
    ids.append(special)
    texts = piece_texts(ids, found.vocab)
    assert len(texts) == len(ids)
    assert "".join(texts) == tokenizer.decode(ids, skip_special_tokens=False)
    table = pieces_table(ids, found.vocab)
    assert table[str(special)][0] == "s"
    assert any(kind == "b" for kind, _ in table.values())  # the emoji's pieces


def test_a_byte_level_tokenizer_decodes_id_by_id_to_its_own_text(tmp_path: Path) -> None:
    _round_trip(byte_level_tokenizer(tmp_path / "tok"))


def test_the_default_models_tokenizer_decodes_id_by_id(default_tokenizer_dir: Path) -> None:
    _round_trip(default_tokenizer_dir)


def test_the_default_model_is_found_by_the_name_it_is_served_as(
    default_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "harbor_ray.report.tokenizer.default_model_dir", lambda: default_tokenizer_dir
    )
    found = find_tokenizer(DEFAULT_MODEL_ID)
    assert found.vocab is not None and found.source == str(default_tokenizer_dir)


def test_without_a_tokenizer_the_section_says_so(tmp_path: Path) -> None:
    found = Tokenizers().for_model("no-such-model-here")
    assert found.vocab is None
    section = token_section(found, [1, 2])
    assert section["tokenizer"] is None and section["pieces"] == {}
    assert section["note"].startswith(
        "no tokenizer for no-such-model-here: showing ids; pass --tokenizer"
    )


def test_a_given_tokenizer_that_is_not_here_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="--tokenizer"):
        Tokenizers(str(tmp_path / "missing"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{")
    with pytest.raises(ReportError, match="cannot read"):
        Tokenizers(str(tmp_path / "broken"))
