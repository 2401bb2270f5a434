"""What a weight update is handed, checked before any engine replica sees it: pure file
reads. A full checkpoint (`check_checkpoint`): a directory of safetensors files whose
headers parse and whose tensors match the served checkpoint's names and shapes. A LoRA
adapter (`is_adapter`, `check_adapter`: peft's `save_pretrained`): a readable config
with a rank the engine takes, and its safetensors. Reading only the headers costs
milliseconds, and refuses what would otherwise fail inside every replica's reload.
"""

from __future__ import annotations

import json
import stat
import struct
from collections.abc import Mapping
from pathlib import Path

from harbor_ray.errors import CheckpointError

__all__ = ["ADAPTER_CONFIG", "check_adapter", "check_checkpoint", "is_adapter"]

ADAPTER_CONFIG = "adapter_config.json"
"""What makes a checkpoint directory a LoRA adapter (peft's `save_pretrained`)."""


def is_adapter(path: str) -> bool:
    """Whether checkpoint directory `path` is a LoRA adapter rather than full weights
    (a path that cannot be read is not: the full checkpoint's check names why)."""
    try:
        return (Path(path) / ADAPTER_CONFIG).is_file()
    except OSError:
        return False


def check_adapter(path: str, max_rank: int | None = None) -> dict[str, tuple[int, ...]]:
    """The tensors of the adapter directory `path`, or CheckpointError: its config must
    be readable with a rank no larger than `max_rank` (the engine's `max_lora_rank`),
    and its weights readable safetensors."""
    file = Path(path) / ADAPTER_CONFIG
    try:
        _regular_size(file)
        config = json.loads(file.read_text())
        rank = int(config["r"])
    except OSError as exc:
        raise CheckpointError(f"{file} cannot be read: {exc.strerror or exc}") from exc
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise CheckpointError(
            f"{file} is not a peft adapter config with a rank `r`: {type(exc).__name__}: {exc}"
        ) from exc
    if max_rank is not None and rank > max_rank:
        raise CheckpointError(
            f"{path} has rank {rank}, above the engine's max_rank "
            f"{max_rank}: raise `lora: max_rank` or train a smaller rank"
        )
    return check_checkpoint(path)


def check_checkpoint(path: str, reference: str | None = None) -> dict[str, tuple[int, ...]]:
    """The tensors (name -> shape) of the safetensors checkpoint directory `path`.

    Raises CheckpointError if it is not a directory of readable safetensors files (a
    header that does not parse, a file shorter than its header says), or if `reference`
    is a local checkpoint directory whose tensor names and shapes differ. Reading only
    the headers costs milliseconds, and refuses what would otherwise fail inside every
    replica's reload, after the engine was paused.
    """
    try:
        tensors = _safetensors_shapes(Path(path))
    except OSError as exc:  # a name too long, a directory that went away meanwhile
        raise CheckpointError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    if reference is not None and Path(reference).is_dir():
        expected = _safetensors_shapes(Path(reference))
        _compare(tensors, expected, path, reference)
    return tensors


def _safetensors_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory")
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{directory} holds no *.safetensors file")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        for name, shape in _header_shapes(file).items():
            if name in shapes:
                raise CheckpointError(f"{file}: tensor {name} is also in another file")
            shapes[name] = shape
    return shapes


def _header_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from one safetensors file's header: an 8-byte little-endian length,
    then that many bytes of JSON giving each tensor's dtype, shape and byte range."""
    try:
        size = _regular_size(file)
        with file.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if 8 + length > size:
                raise ValueError(f"header of {length} bytes in a {size}-byte file")
            header = json.loads(f.read(length))
        header.pop("__metadata__", None)
        end = 8 + length + max((t["data_offsets"][1] for t in header.values()), default=0)
        if end > size:
            raise ValueError(f"tensors end at byte {end} of a {size}-byte file")
        return {name: tuple(t["shape"]) for name, t in header.items()}
    except CheckpointError:  # a ValueError, said already
        raise
    except RecursionError as exc:  # json's decoder recurses once per level
        raise CheckpointError(
            f"{file} is not a readable safetensors file: its header is nested too deep"
        ) from exc
    except OSError as exc:  # a directory, a dangling link, unreadable
        raise CheckpointError(
            f"{file} is not a readable safetensors file: {exc.strerror or exc}"
        ) from exc
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise CheckpointError(f"{file} is not a readable safetensors file: {exc}") from exc


def _regular_size(file: Path) -> int:
    """The size of `file`, a regular file (through links), or a CheckpointError: anything
    else is never opened, since opening a FIFO waits for a writer that may never come,
    holding the update (and a thread) with it, and a device reads forever."""
    info = file.stat()
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"{file} is not a regular file (a directory, FIFO, device "
            "or socket): a checkpoint's tensors are regular files"
        )
    return info.st_size


def _compare(
    tensors: Mapping[str, tuple[int, ...]],
    expected: Mapping[str, tuple[int, ...]],
    path: str,
    reference: str,
) -> None:
    missing = sorted(expected.keys() - tensors.keys())
    extra = sorted(tensors.keys() - expected.keys())
    reshaped = sorted(n for n in expected.keys() & tensors.keys() if tensors[n] != expected[n])
    problems = [
        f"{label} {names[:3]}{' ...' if len(names) > 3 else ''}"
        for label, names in (("missing", missing), ("unexpected", extra), ("reshaped", reshaped))
        if names
    ]
    if problems:
        raise CheckpointError(
            f"{path} does not match the served checkpoint {reference}: {'; '.join(problems)}"
        )
