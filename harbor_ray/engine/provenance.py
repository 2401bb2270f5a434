"""What an engine started from an `EngineConfig` serves, as hashes a dataset's rows carry
(`Provenance`: the weights, the tokenizer, the chat template).

Computed once per engine, on the machine that starts it, from the files the engine is
handed: the model directory vLLM loads and the chat template it renders with (the
config's, the one shipped for the default model, else the model's own, as transformers
loads it: `chat_template.jinja` beside the tokenizer, else `tokenizer_config.json`'s
`chat_template`). The tokenizer's hash leaves the template out, so that a new template
changes one hash, not two; it reads the tokenizer's JSON files as JSON, keys sorted,
and leaves out the keys transformers writes back from how it loaded the tokenizer
(`local_files_only`, ...), so that two saves of one tokenizer hash alike: a checkpoint
saved by a trainer beside the model it started from. A hub id is not read here (it may not be
in this machine's cache, and the engine resolves it itself): its hashes are None.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from harbor_ray.data.result import Provenance

__all__ = ["TOKENIZER_FILES", "WEIGHT_SUFFIXES", "served_provenance"]

# The files transformers' tokenizers load from a model directory, those present hashed.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_TEMPLATE_FILE = "chat_template.jinja"
_TOKENIZER_CONFIG = "tokenizer_config.json"
# Keys transformers writes back into tokenizer_config.json from how the tokenizer was
# loaded (a trainer that loads with local_files_only=True saves it so), not what it is.
_LOAD_KEYS = (
    "chat_template",
    "local_files_only",
    "name_or_path",
    "_commit_hash",
    "cache_dir",
    "revision",
    "subfolder",
    "trust_remote_code",
    "token",
    "use_auth_token",
    "force_download",
    "proxies",
)
_CHUNK = 1 << 20


def served_provenance(model_source: str, chat_template: Path | None) -> Provenance:
    """The engine's half of a row's provenance: `model_source` as vLLM is handed it (a
    directory or a hub id), `chat_template` the template file it is given (None: the
    model's own)."""
    directory = Path(model_source)
    if not directory.is_dir():
        return Provenance(
            model_source=model_source, chat_template_sha256=_file_sha256(chat_template)
        )
    template = (
        _file_sha256(chat_template)
        if chat_template is not None
        else _own_template_sha256(directory)
    )
    return Provenance(
        model_source=str(directory.resolve()),
        weights_sha256=_files_sha256(
            directory,
            sorted(p.name for p in directory.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)),
        ),
        chat_template_sha256=template,
        tokenizer_sha256=_files_sha256(
            directory, [name for name in TOKENIZER_FILES if (directory / name).is_file()]
        ),
    )


def _own_template_sha256(directory: Path) -> str | None:
    file = directory / _TEMPLATE_FILE
    if file.is_file():
        return _file_sha256(file)
    config = _tokenizer_config(directory)
    template = config.get("chat_template")
    if isinstance(template, str):
        return hashlib.sha256(template.encode()).hexdigest()
    return None


def _tokenizer_config(directory: Path) -> dict[str, object]:
    try:
        value = json.loads((directory / _TOKENIZER_CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _files_sha256(directory: Path, names: Iterable[str]) -> str | None:
    """One sha256 over each file's name and bytes, in the order given; None for none."""
    digest = hashlib.sha256()
    found = False
    for name in names:
        found = True
        digest.update(name.encode() + b"\0")
        if name.endswith(".json") and name in TOKENIZER_FILES:
            digest.update(_canonical_json(directory / name))
            continue
        with (directory / name).open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest() if found else None


def _canonical_json(path: Path) -> bytes:
    """A tokenizer's JSON file as sorted JSON, its loading keys left out (a save that
    changes only the layout or those keys is the same tokenizer)."""
    value = json.loads(path.read_text())
    if path.name == _TOKENIZER_CONFIG and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in _LOAD_KEYS}
    return json.dumps(value, sort_keys=True).encode()


def _file_sha256(path: Path | None) -> str | None:
    if path is None:
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()
