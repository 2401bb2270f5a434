"""Ids to display pieces, id by id: partial UTF-8, special tokens, unknown ids."""

from __future__ import annotations

from harbor_ray.report.token_text import VocabEntry, byte_level_bytes, piece_texts, pieces_table

# "🤖" is f0 9f a4 96: split over three ids as a byte-level BPE vocab splits it.
VOCAB = {
    1: VocabEntry(b"hi"),
    2: VocabEntry(b" \xf0\x9f"),
    3: VocabEntry(b"\xa4"),
    4: VocabEntry(b"\x96!"),
    5: VocabEntry(b"<|end|>", special=True),
    6: VocabEntry(b"\n"),
    7: VocabEntry("é".encode()),
}


def test_a_split_character_lands_on_the_id_that_completes_it() -> None:
    ids = [1, 2, 3, 4, 6]
    texts = piece_texts(ids, VOCAB)
    assert texts == ["hi", " ", "", "🤖!", "\n"]
    assert "".join(texts) == b"".join(VOCAB[i].data for i in ids).decode()


def test_the_table_keeps_each_id_whole_and_says_its_kind() -> None:
    table = pieces_table([4, 1, 2, 3, 5, 1, 7], VOCAB)
    assert table == {
        "1": ["t", "hi"],
        "2": ["b", "20f09f"],
        "3": ["b", "a4"],
        "4": ["b", "9621"],
        "5": ["s", "<|end|>"],
        "7": ["t", "é"],
    }


def test_an_unknown_id_is_left_out_and_ends_a_broken_character() -> None:
    assert pieces_table([1, 99], VOCAB) == {"1": ["t", "hi"]}
    texts = piece_texts([2, 99, 1], VOCAB)
    assert texts == [" ", "\ufffd", "hi"]  # the orphan bytes never make a character
    assert piece_texts([2], VOCAB) == [" \ufffd"]  # nor at the end of the ids


def test_special_tokens_are_their_text() -> None:
    assert piece_texts([1, 5], VOCAB) == ["hi", "<|end|>"]


def test_byte_level_strings_are_their_bytes() -> None:
    assert byte_level_bytes("Ġhello") == b" hello"
    assert byte_level_bytes("Ċ") == b"\n"
    assert byte_level_bytes("ĠðŁ") == b" \xf0\x9f"
    assert byte_level_bytes("▁hello") is None  # SentencePiece's, not byte-level
