"""The served model's tokenizer, from this machine only, read as a vocab (token_text's).

Found in this order: `--tokenizer` (a directory, or a Hugging Face name in the local
cache), else the model the rows name: a directory of that name, the default engine's
prepared model (its id is the default `model_id`), or the Hugging Face cache. Nothing
is downloaded: only a `tokenizer.json` already on disk is read.

It is read with the `tokenizers` library (what transformers' fast tokenizers are made
of, installed with the engine extras): the same file and the same vocab, loaded in a
fraction of a second where importing transformers takes tens of seconds on a busy
machine. Without it, or without a tokenizer here, the viewers show ids and say why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor_ray.engine.model import DEFAULT_MODEL_ID, default_model_dir
from harbor_ray.errors import ModelUnavailableError, ReportError
from harbor_ray.report.token_text import VocabEntry, byte_level_bytes, pieces_table

__all__ = [
    "TokenText",
    "TokenizerVocab",
    "Tokenizers",
    "find_tokenizer",
    "no_tokenizer_note",
    "token_section",
]

TOKENIZER_FILE = "tokenizer.json"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizerVocab(Mapping[int, VocabEntry]):
    """A `tokenizers.Tokenizer` as `id -> VocabEntry`, each entry read on first use."""

    def __init__(self, tokenizer: Any, source: str) -> None:
        self.source = source
        self._tokenizer = tokenizer
        self._size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        self._added = dict(tokenizer.get_added_tokens_decoder())
        self._byte_level = "ByteLevel" in repr(tokenizer.decoder)
        self._entries: dict[int, VocabEntry] = {}

    def __getitem__(self, token_id: int) -> VocabEntry:
        if token_id not in self._entries:
            self._entries[token_id] = self._entry(token_id)
        return self._entries[token_id]

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._size))

    def __len__(self) -> int:
        return self._size

    def _entry(self, token_id: int) -> VocabEntry:
        added = self._added.get(token_id)
        if added is not None:  # written as plain text in the vocab, not as bytes
            return VocabEntry(added.content.encode(), special=bool(added.special))
        token = self._tokenizer.id_to_token(token_id) if 0 <= token_id < self._size else None
        if token is None:
            raise KeyError(token_id)
        if self._byte_level and (data := byte_level_bytes(token)) is not None:
            return VocabEntry(data)
        if match := _BYTE_FALLBACK.fullmatch(token):  # SentencePiece's byte fallback
            return VocabEntry(bytes([int(match[1], 16)]))
        if "\u2581" in token:  # SentencePiece's word boundary: a space
            return VocabEntry(token.replace("\u2581", " ").encode())
        # Other decoders (WordPiece's "##"): the tokenizer's own text of the id alone.
        return VocabEntry(self._tokenizer.decode([token_id], skip_special_tokens=False).encode())


@dataclass(frozen=True)
class TokenText:
    """What a viewer can show as token text: the model, and the vocab and where it was
    read (`source`), or why there is none (`missing`)."""

    model: str | None
    vocab: Mapping[int, VocabEntry] | None
    source: str | None = None
    missing: str | None = None

    @property
    def note(self) -> str:
        if self.vocab is not None:
            return (
                f"Token text decoded for display with the tokenizer at {self.source}; "
                "the ids are what the dataset stores."
            )
        return no_tokenizer_note(self.model, self.missing)


def token_section(text: TokenText, ids: Iterable[int]) -> dict[str, Any]:
    """The document's `tokens`: the model, the tokenizer's source (None: ids only), what
    the page says about it, and the pieces of `ids` (token_text.pieces_table)."""
    vocab = text.vocab
    return {
        "model": text.model,
        "tokenizer": text.source if vocab else None,
        "note": text.note,
        "pieces": pieces_table(ids, vocab) if vocab else {},
    }


class Tokenizers:
    """The tokenizer of each model a document names, found once: a live view rebuilds
    its document on every commit, and loading a tokenizer takes seconds. A `tokenizer`
    given is loaded here, so a wrong one fails at the start (ReportError)."""

    def __init__(self, tokenizer: str | None = None) -> None:
        self._given = find_tokenizer(None, tokenizer) if tokenizer else None
        self._found: dict[str | None, TokenText] = {}

    def for_model(self, model: str | None) -> TokenText:
        if self._given is not None:
            return TokenText(model, self._given.vocab, self._given.source)
        if model not in self._found:
            self._found[model] = find_tokenizer(model)
        return self._found[model]


def no_tokenizer_note(model: str | None, why: str | None) -> str:
    return f"no tokenizer for {model or 'an unnamed model'}: showing ids; pass --tokenizer" + (
        f" ({why})" if why else ""
    )


def find_tokenizer(model: str | None, tokenizer: str | None = None) -> TokenText:
    """The tokenizer of `model` found on this machine, or `tokenizer` (a directory or a
    Hugging Face name) when given. A given one that cannot be read is a ReportError; a
    model's that is not here is a TokenText without a vocab, saying why."""
    wanted = tokenizer or model
    found = _open(wanted) if wanted else "the rows name no model"
    if isinstance(found, str):
        if tokenizer is not None:
            raise ReportError(f"--tokenizer {tokenizer}: {found}")
        return TokenText(model, None, missing=found)
    return TokenText(model, found, found.source)


def _open(name: str) -> TokenizerVocab | str:
    """The vocab of `name`'s tokenizer, or why there is none here."""
    where = _local_source(name)
    if where is None:
        return (
            "no tokenizer.json for it on this machine (a directory, the default "
            "model, or the local Hugging Face cache; nothing is downloaded)"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return "the tokenizers package is not installed (the engine extras install it)"
    try:
        return TokenizerVocab(Tokenizer.from_file(str(where)), str(where.parent))
    except Exception as exc:  # the library raises a bare Exception for a broken file
        return f"cannot read {where}: {exc}"


def _local_source(name: str) -> Path | None:
    """The tokenizer.json of `name` (a directory, the default model or a cached Hugging
    Face name) on this machine, or None."""
    if Path(name).is_dir():
        return _file_in(Path(name))
    if name == DEFAULT_MODEL_ID:  # prepared by harbor_ray, not in the Hugging Face cache
        try:
            return _file_in(default_model_dir())
        except ModelUnavailableError:
            return None
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(name, TOKENIZER_FILE)
    except HFValidationError:  # not a repository name at all
        return None
    return Path(cached) if isinstance(cached, str) else None


def _file_in(directory: Path) -> Path | None:
    path = directory / TOKENIZER_FILE
    return path if path.is_file() else None
