"""Token ids to display text, id by id, for the viewers: pure (ids and a vocab in, JSON out).

The dataset stores the engine's ids; their text is for the eyes only and is never
written back. Each id is shown as its own piece, never merged with its neighbours or
split: an id whose bytes are not whole UTF-8 on their own (a byte-level BPE piece that
holds half of a character) is shown as its bytes, and the text of a run of ids is what
an incremental UTF-8 decoder gives them in order (`piece_texts`): the character lands
on the id that completes it, so the texts concatenate to the decoded sequence.

The pieces table maps each distinct id of a report to its piece once, so a report
costs one entry per distinct id (at most the vocabulary), not a string per token.
tokens.js reads the table and does the same incremental decoding in the browser.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Literal

__all__ = ["PieceKind", "VocabEntry", "byte_level_bytes", "piece_texts", "pieces_table"]

PieceKind = Literal["text", "bytes", "special"]
"""text: the id's bytes are whole UTF-8; bytes: they are not (shown as hex); special: a
control token (`<|im_end|>`), shown as its name."""

_KIND_CODE = {"text": "t", "bytes": "b", "special": "s"}


@dataclass(frozen=True)
class VocabEntry:
    """What one id decodes to: its bytes, and whether it is a special token."""

    data: bytes
    special: bool = False


def _kind(entry: VocabEntry) -> PieceKind:
    if entry.special:
        return "special"
    try:
        entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes"
    return "text"


def pieces_table(ids: Iterable[int], vocab: Mapping[int, VocabEntry]) -> dict[str, list[str]]:
    """The JSON table of each distinct id in `ids` that `vocab` knows:
    `{"id": [kind code, value]}` with code `t` (value: the text), `s` (value: the
    special token's text) or `b` (value: the bytes as hex). An id the vocab lacks (out
    of its range) is left out: the viewer shows it as an id."""
    table: dict[str, list[str]] = {}
    for token_id in sorted(set(ids)):
        entry = vocab.get(token_id)
        if entry is None:
            continue
        code = _KIND_CODE[_kind(entry)]
        value = entry.data.hex() if code == "b" else entry.data.decode("utf-8")
        table[str(token_id)] = [code, value]
    return table


def piece_texts(ids: Iterable[int], vocab: Mapping[int, VocabEntry]) -> list[str]:
    """Each id's share of the decoded text, in order: they concatenate to the sequence
    decoded at once (bytes that never make a character become U+FFFD). An unknown id's
    share is empty, and it ends any character left incomplete before it."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = []
    for token_id in ids:
        entry = vocab.get(token_id)
        if entry is None:
            out.append(decoder.decode(b"", final=True))
            decoder.reset()
        else:
            out.append(decoder.decode(entry.data))
    if out:
        out[-1] += decoder.decode(b"", final=True)
    return out


@cache
def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's): each byte is written as one printable
    character, the printable Latin-1 bytes as themselves and the rest (controls, space)
    as the characters from U+0100 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in chars)
    chars.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return {c: b for b, c in chars.items()}


def byte_level_bytes(token: str) -> bytes | None:
    """The bytes of a byte-level BPE vocab string (`Ġhello` -> b" hello"), or None
    when it holds a character outside that alphabet (not a byte-level token)."""
    table = _byte_of_char()
    try:
        return bytes(table[c] for c in token)
    except KeyError:
        return None
