"""The weight updater's steps, timeouts and rollback, against replicas that only record
calls (tests/engine/test_weights_engine.py runs it on the real engine)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from harbor_ray.engine.checkpoints import ADAPTER_CONFIG, check_adapter, check_checkpoint
from harbor_ray.engine.weights import KIND_METHOD, LABEL_METHOD, StepTimeouts, WeightUpdater
from harbor_ray.engine.worker import RELOAD_METHOD, refresh_tied_layers
from harbor_ray.errors import CheckpointError, WeightsRefusedError, WeightVersionError

OLD, NEW = "/ckpt/old", "/ckpt/new"
FAST = StepTimeouts(pause_s=0.2, reload_s=0.2, cache_s=0.2, resume_s=0.2)
HANG = "hang"


def _what(method: str, kwargs: dict[str, Any]) -> str:
    """A call as the step it is: pause, cache, resume, reload:<path> or label:<version>;
    for adapters load:<path>, use:<version> (base: none), drop:<version>."""
    if method in ("load_adapter", "use_adapter", "drop_adapter"):
        tag = kwargs["tag"]
        version = "base" if tag is None else tag.split("-")[0]
        if method == "load_adapter":
            assert tag.startswith(f"v{kwargs['version']}-")
            return f"load:{kwargs['path']}"
        return f"{method.removesuffix('_adapter')}:{version}"
    if method == LABEL_METHOD:
        return f"label:{kwargs['version']}"
    if method == "collective_rpc":
        assert kwargs["method"] == RELOAD_METHOD
        return f"reload:{kwargs['kwargs']['weights_path']}"
    if method == "pause":
        assert kwargs["mode"] == "keep"  # in-flight requests are never aborted
        return "cache" if kwargs["clear_cache"] else "pause"
    assert method == "resume"
    return method


class FakeReplica:
    """Records each call in a shared log; `faults` makes a call raise, or hang."""

    def __init__(
        self,
        name: str,
        log: list[tuple[str, str]],
        faults: dict[str, BaseException | str] | None = None,
        lora_rank: int | None = None,
    ) -> None:
        self.name = name
        self._log = log
        self._faults = faults or {}
        self._lora_rank = lora_rank  # None: no LoRA slots

    async def call(self, method: str, /, **kwargs: Any) -> Any:
        if method == KIND_METHOD:  # a question, not a step: not logged
            return {"lora": self._lora_rank is not None, "max_rank": self._lora_rank}
        what = _what(method, kwargs)
        self._log.append((self.name, what))
        fault = self._faults.get(what)
        if fault == HANG:
            await asyncio.Event().wait()
        elif isinstance(fault, BaseException):
            raise fault
        await asyncio.sleep(0)
        return []


def _updater(replicas: list[FakeReplica], **kwargs: Any) -> WeightUpdater:
    async def listed() -> list[FakeReplica]:
        return replicas

    return WeightUpdater(listed, path=OLD, check=False, timeouts=FAST, **kwargs)


def _calls(log: list[tuple[str, str]], name: str) -> list[str]:
    return [what for who, what in log if who == name]


@pytest.mark.parametrize("clear_cache", [False, True])
async def test_every_replica_pauses_reloads_labels_and_resumes_in_order(clear_cache: bool) -> None:
    log: list[tuple[str, str]] = []
    replicas = [FakeReplica(f"r{i}", log) for i in range(3)]
    updater = _updater(replicas, clear_cache=clear_cache)
    result = await updater.update(NEW, 1)
    assert result.ok and result.version == updater.version == 1 and updater.path == NEW
    steps = ["pause", "reload", *(["cache"] if clear_cache else []), "label", "resume"]
    for replica in replicas:
        assert _calls(log, replica.name) == [
            "pause",
            f"reload:{NEW}",
            *(["cache"] if clear_cache else []),
            "label:1",
            "resume",
        ]
    # A step starts on a replica only once every replica finished the one before.
    assert [what.split(":")[0] for _, what in log] == sorted(
        (what.split(":")[0] for _, what in log), key=steps.index
    )
    assert [(r.replica, r.serving_version) for r in result.replicas] == [
        ("r0", 1),
        ("r1", 1),
        ("r2", 1),
    ]
    assert set(result.step_seconds) == set(steps)
    assert set(result.replicas[0].seconds) == set(steps)


async def test_an_engine_without_labels_is_only_reloaded() -> None:
    log: list[tuple[str, str]] = []
    result = await _updater([FakeReplica("r0", log)], label_method=None).update(NEW, 1)
    assert result.ok and _calls(log, "r0") == ["pause", f"reload:{NEW}", "resume"]


@pytest.mark.parametrize("version", [0, -1])
async def test_a_version_that_does_not_increase_is_refused_untouched(version: int) -> None:
    log: list[tuple[str, str]] = []
    updater = _updater([FakeReplica("r0", log)])
    with pytest.raises(WeightVersionError):
        await updater.update(NEW, version)
    assert log == [] and updater.version == 0


@pytest.mark.parametrize("fault", [RuntimeError("no such file"), HANG])
async def test_a_failed_reload_rolls_every_replica_back(fault: BaseException | str) -> None:
    log: list[tuple[str, str]] = []
    replicas = [
        FakeReplica("r0", log),
        FakeReplica("r1", log, {f"reload:{NEW}": fault}),
        FakeReplica("r2", log),
    ]
    updater = _updater(replicas)
    result = await updater.update(NEW, 1)
    assert not result.ok and result.version == updater.version == 0 and updater.path == OLD
    [failed] = result.failed
    assert failed.replica == "r1" and failed.failed_step == "reload"
    assert ("timed out" if fault == HANG else "RuntimeError: no such file") in failed.error
    # The replica that failed may be half-loaded: it is rolled back with the others.
    for replica in replicas:
        assert _calls(log, replica.name) == [
            "pause",
            f"reload:{NEW}",
            f"reload:{OLD}",
            "cache",
            "label:0",
            "resume",
        ]
    assert all(r.serving_version == 0 for r in result.replicas)
    assert "rollback" in result.step_seconds and "cache" not in result.step_seconds


async def test_a_failed_pause_reloads_nothing_and_resumes_all() -> None:
    log: list[tuple[str, str]] = []
    replicas = [FakeReplica("r0", log, {"pause": HANG}), FakeReplica("r1", log)]
    result = await _updater(replicas).update(NEW, 1)
    assert not result.ok and result.version == 0
    assert [(r.replica, r.failed_step) for r in result.replicas] == [("r0", "pause"), ("r1", None)]
    for replica in replicas:
        assert _calls(log, replica.name) == ["pause", "resume"]


async def test_a_failed_cache_reset_rolls_back() -> None:
    log: list[tuple[str, str]] = []
    replicas = [FakeReplica("r0", log), FakeReplica("r1", log, {"cache": RuntimeError("x")})]
    result = await _updater(replicas, clear_cache=True).update(NEW, 1)
    assert result.version == 0 and [r.replica for r in result.failed] == ["r1"]
    assert _calls(log, "r0") == [
        "pause",
        f"reload:{NEW}",
        "cache",
        f"reload:{OLD}",
        "cache",
        "label:0",
        "resume",
    ]


async def test_a_failed_label_rolls_back_and_labels_the_old_version_again() -> None:
    log: list[tuple[str, str]] = []
    replicas = [FakeReplica("r0", log), FakeReplica("r1", log, {"label:1": RuntimeError("x")})]
    result = await _updater(replicas).update(NEW, 1)
    assert result.version == 0 and [(r.replica, r.failed_step) for r in result.failed] == [
        ("r1", "label")
    ]
    assert _calls(log, "r0") == [
        "pause",
        f"reload:{NEW}",
        "label:1",
        f"reload:{OLD}",
        "cache",
        "label:0",
        "resume",
    ]


async def test_a_replica_whose_rollback_fails_is_left_paused_and_unnamed() -> None:
    log: list[tuple[str, str]] = []
    broken = {f"reload:{NEW}": RuntimeError("bad"), f"reload:{OLD}": RuntimeError("worse")}
    replicas = [FakeReplica("r0", log), FakeReplica("r1", log, broken)]
    result = await _updater(replicas).update(NEW, 1)
    assert [(r.replica, r.serving_version) for r in result.replicas] == [("r0", 0), ("r1", None)]
    assert result.failed[0].error == "RuntimeError: bad"  # the first failure is the one kept
    assert _calls(log, "r1") == ["pause", f"reload:{NEW}", f"reload:{OLD}"]
    assert _calls(log, "r0")[-1] == "resume"


async def test_a_failed_resume_keeps_the_new_version_and_says_so() -> None:
    # Every replica holds the new weights by then: rolling back would change more.
    log: list[tuple[str, str]] = []
    replicas = [FakeReplica("r0", log, {"resume": RuntimeError("gone")}), FakeReplica("r1", log)]
    updater = _updater(replicas)
    result = await updater.update(NEW, 1)
    assert updater.version == result.version == 1 and not result.ok
    assert [(r.replica, r.failed_step) for r in result.failed] == [("r0", "resume")]


async def test_updates_run_one_at_a_time() -> None:
    log: list[tuple[str, str]] = []
    updater = _updater([FakeReplica("r0", log)])
    first, second = await asyncio.gather(updater.update(NEW, 1), updater.update(OLD, 2))
    assert first.ok and second.ok and updater.version == 2
    assert _calls(log, "r0") == [
        "pause",
        f"reload:{NEW}",
        "label:1",
        "resume",
        "pause",
        f"reload:{OLD}",
        "label:2",
        "resume",
    ]


async def test_no_replica_is_an_error() -> None:
    with pytest.raises(WeightsRefusedError, match="no running replica"):
        await _updater([]).update(NEW, 1)


# --- checkpoints ----------------------------------------------------------------------


def _checkpoint(directory: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    directory.mkdir()
    save_file(
        {n: np.zeros(s, dtype=np.float32) for n, s in shapes.items()},
        str(directory / "model.safetensors"),
    )
    return directory


SHAPES = {"embed.weight": (4, 2), "norm.weight": (2,)}


def test_a_checkpoint_with_the_served_tensors_passes(tmp_path: Path) -> None:
    served = _checkpoint(tmp_path / "served", SHAPES)
    new = _checkpoint(tmp_path / "new", SHAPES)
    assert check_checkpoint(str(new), str(served)) == SHAPES


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"embed.weight": (4, 2)}, "missing"),
        ({**SHAPES, "extra": (1,)}, "unexpected"),
        ({"embed.weight": (4, 3), "norm.weight": (2,)}, "reshaped"),
    ],
)
def test_a_checkpoint_of_other_tensors_is_refused(
    tmp_path: Path, shapes: dict[str, tuple[int, ...]], message: str
) -> None:
    served = _checkpoint(tmp_path / "served", SHAPES)
    with pytest.raises(CheckpointError, match=message):
        check_checkpoint(str(_checkpoint(tmp_path / "new", shapes)), str(served))


def test_unreadable_checkpoints_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a directory"):
        check_checkpoint(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        check_checkpoint(str(tmp_path / "empty"))
    file = _checkpoint(tmp_path / "cut", SHAPES) / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-4])
    with pytest.raises(CheckpointError, match="tensors end at byte"):
        check_checkpoint(str(file.parent))
    file.write_bytes((10**6).to_bytes(8, "little") + json.dumps({}).encode())
    with pytest.raises(CheckpointError, match="header of"):
        check_checkpoint(str(file.parent))
    file.write_bytes((2).to_bytes(8, "little") + b"[]")
    with pytest.raises(CheckpointError, match="not a readable"):
        check_checkpoint(str(file.parent))


async def test_the_updater_checks_before_touching_the_engine(tmp_path: Path) -> None:
    served = _checkpoint(tmp_path / "served", SHAPES)
    bad = _checkpoint(tmp_path / "bad", {"embed.weight": (4, 2)})
    log: list[tuple[str, str]] = []

    async def listed() -> list[FakeReplica]:
        return [FakeReplica("r0", log)]

    updater = WeightUpdater(listed, path=str(served))
    with pytest.raises(CheckpointError):
        await updater.update(str(bad), 1)
    assert log == []
    assert (await updater.update(str(_checkpoint(tmp_path / "good", SHAPES)), 1)).ok


# --- LoRA adapters --------------------------------------------------------------------


def _adapter(directory: Path, rank: int = 8) -> str:
    """An adapter directory as peft's save_pretrained writes it (its tensors zeros)."""
    _checkpoint(
        directory,
        {
            "base_model.model.q_proj.lora_A.weight": (rank, 4),
            "base_model.model.q_proj.lora_B.weight": (4, rank),
        },
    )
    (directory / ADAPTER_CONFIG).write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return str(directory)


def _lora_replicas(
    log: list[tuple[str, str]],
    faults: dict[str, dict[str, BaseException | str]] | None = None,
    n: int = 2,
) -> list[FakeReplica]:
    return [FakeReplica(f"r{i}", log, (faults or {}).get(f"r{i}"), lora_rank=16) for i in range(n)]


async def test_an_adapter_is_loaded_everywhere_then_switched_without_a_pause(
    tmp_path: Path,
) -> None:
    log: list[tuple[str, str]] = []
    replicas = _lora_replicas(log)
    updater = _updater(replicas)
    first, second = _adapter(tmp_path / "v1"), _adapter(tmp_path / "v2")
    result = await updater.update(first, 1)
    assert result.ok and updater.version == 1 and updater.path == first
    assert set(result.step_seconds) == {"load", "switch"}
    # Every replica has it before any switches to it.
    assert [what.split(":")[0] for _, what in log] == ["load", "load", "use", "use"]
    assert (await updater.update(second, 2)).ok
    for replica in replicas:
        assert _calls(log, replica.name) == [f"load:{first}", "use:v1", f"load:{second}", "use:v2"]


async def test_a_failed_adapter_load_leaves_every_replica_on_the_old_version(
    tmp_path: Path,
) -> None:
    log: list[tuple[str, str]] = []
    first, second = _adapter(tmp_path / "v1"), _adapter(tmp_path / "v2")
    updater = _updater(_lora_replicas(log, {"r1": {f"load:{second}": RuntimeError("rank")}}))
    assert (await updater.update(first, 1)).ok
    result = await updater.update(second, 2)
    assert not result.ok and result.version == updater.version == 1 and updater.path == first
    [failed] = result.failed
    assert failed.replica == "r1" and failed.failed_step == "load" and "rank" in str(failed.error)
    assert [r.serving_version for r in result.replicas] == [1, 1]
    # No replica switched; the new adapter is removed wherever it loaded.
    assert _calls(log, "r0") == [f"load:{first}", "use:v1", f"load:{second}", "drop:v2"]


async def test_a_failed_switch_switches_every_replica_back(tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    first = _adapter(tmp_path / "v1")
    updater = _updater(_lora_replicas(log, {"r1": {"use:v1": RuntimeError("gone")}}))
    result = await updater.update(first, 1)
    assert not result.ok and updater.version == 0
    assert [r.failed_step for r in result.replicas] == [None, "switch"]
    # Back to the base model (no adapter served before), then the adapter removed.
    assert _calls(log, "r0") == [f"load:{first}", "use:v1", "use:base", "drop:v1"]


async def test_an_update_of_the_other_kind_is_refused_naming_the_fix(tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    adapter = _adapter(tmp_path / "v1")
    with pytest.raises(CheckpointError, match=r"no LoRA slots: start it with `lora:"):
        await _updater([FakeReplica("r0", log)]).update(adapter, 1)
    with pytest.raises(CheckpointError, match="only harbor_ray's engine"):
        await _updater([FakeReplica("r0", log)], label_method=None).update(adapter, 1)
    # One replica with slots is enough to refuse full weights: they would sit under
    # every adapter loaded on it.
    mixed = [FakeReplica("r0", log), FakeReplica("r1", log, lora_rank=8)]
    with pytest.raises(CheckpointError, match="send the adapter directory"):
        await _updater(mixed).update(NEW, 1)
    assert log == []


async def test_full_weights_after_an_adapter_are_refused_as_the_other_kind(tmp_path: Path) -> None:
    """Checked (as the service checks): the full checkpoint is not compared with the
    adapter serving, whose tensors it never has, but refused as the kind the engine does
    not take, naming what to send."""
    log: list[tuple[str, str]] = []

    async def listed() -> list[FakeReplica]:
        return _lora_replicas(log)

    updater = WeightUpdater(listed, path=OLD, timeouts=FAST)
    assert (await updater.update(_adapter(tmp_path / "v1"), 1)).ok
    full = str(_checkpoint(tmp_path / "full", SHAPES))
    with pytest.raises(CheckpointError, match="send the adapter directory"):
        await updater.update(full, 2)
    assert updater.version == 1


def test_an_adapter_is_checked_against_the_engine_rank(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "v1", rank=32)
    assert len(check_adapter(adapter, 32)) == 2
    with pytest.raises(CheckpointError, match="above the engine's max_rank 16"):
        check_adapter(adapter, 16)
    (Path(adapter) / ADAPTER_CONFIG).write_text("{}")
    with pytest.raises(CheckpointError, match="rank `r`"):
        check_adapter(adapter)


# --- the worker's refresh of tied layers ----------------------------------------------


class Packing:
    """A quant method whose processing keeps a copy of the weight, as vLLM's CPU
    embedding method keeps a oneDNN copy for the logits."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        layer.packed = layer.weight.detach().clone()


def test_tied_layers_are_processed_again_from_the_shared_weight() -> None:
    embed, head, other = torch.nn.Linear(2, 3), torch.nn.Linear(2, 3), torch.nn.Linear(2, 3)
    head.weight = embed.weight  # tied
    for layer in (embed, head, other):
        layer.quant_method = Packing()
        layer.quant_method.process_weights_after_loading(layer)
    with torch.no_grad():
        embed.weight.add_(1.0)  # the reload wrote new values into the shared weight
        other.weight.add_(1.0)
    model = torch.nn.ModuleList([embed, head, other])
    assert refresh_tied_layers(model, Packing) == 2
    assert torch.equal(head.packed, embed.weight) and torch.equal(embed.packed, embed.weight)
    assert not torch.equal(other.packed, other.weight)  # not tied: the reload processed it
    assert refresh_tied_layers(model, type(None)) == 0  # other quant methods are left alone
