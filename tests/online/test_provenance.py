"""Every row the online service writes says what made it (`provenance`): the harness
its group's agent ran, and, where the service's engine is its own, what that engine
serves; the weights only on rows the engine's first weights sampled. The controller runs
in this process (`local_controller`), its rollouts made here with turns stamped by the
version the engine served."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from ray.serve.schema import ServeApplicationSchema

from harbor_ray.capture.core.record import close_capture
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ENGINE_FIELDS, Provenance, RolloutResult
from harbor_ray.engine.provenance import served_provenance
from harbor_ray.online.controller import Controller
from harbor_ray.online.serve import OWN_ENGINE, ControllerArgs, own_engine
from harbor_ray.online.wire import SubmitRequest, WeightsRequest
from harbor_ray.trials.harness import harness_provenance
from harbor_ray.trials.spec import RolloutSpec
from tests.capture.turns_factory import turn
from tests.online.local import LocalRollouts, local_controller


class Sampled(LocalRollouts):
    """Each rollout one turn, sampled at the version the engine serves when it runs
    (`segments`: the engine's own labels, for a call an update crossed)."""

    def __init__(self) -> None:
        super().__init__()
        self.controller: Controller | None = None
        self.segments: tuple[tuple[int, int], ...] | None = None

    async def run(self, spec: RolloutSpec) -> RolloutRecord:
        assert self.controller is not None
        version = self.controller.version
        sampled = dataclasses.replace(
            turn(0, [1, 2], [3, 4]),
            policy_version_start=version,
            policy_version_end=version,
            policy_segments=self.segments,
        )
        return encode_record(
            RolloutResult(
                rollout_id=spec.rollout_id,
                task=spec.task.name,
                agent=spec.agent,
                sandbox=spec.sandbox,
                ok=True,
                reward=1.0,
                provenance=spec.provenance,
            ),
            close_capture([sampled]),
        )


def _model(root: Path) -> tuple[Path, Path]:
    """A model directory (weights, tokenizer, its own template) and a template file."""
    model = root / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer.json").write_text('{"vocab": {"a": 0}}')
    (model / "tokenizer_config.json").write_text('{"chat_template": "own"}')
    template = root / "chat.jinja"
    template.write_text("{{ messages }}")
    return model, template


def _submit(request_id: str) -> SubmitRequest:
    return SubmitRequest.model_validate(
        {
            "request_id": request_id,
            "agent": "terminus-2",
            "tasks": [
                {"task": "hello-file", "n": 2},
                {"task": "count-words", "n": 1, "agent": "oracle"},
            ],
        }
    )


async def _rows(controller: Controller, request_id: str) -> list[dict[str, Any]]:
    """The rows of one submit's groups, once delivered (and acknowledged)."""
    submitted = await controller.submit(_submit(request_id))
    rows: list[dict[str, Any]] = []
    while len(rows) < 3:
        groups = await controller.groups(8, wait_s=30)
        rows += [row for group in groups for row in group.rollouts]
        await controller.ack([group.group_id for group in groups])
    assert {row["rollout_id"].split("__")[0] for row in rows} == {
        ref.group_id for ref in submitted.groups
    }
    return rows


def _harness(agent: str) -> Provenance:
    return harness_provenance(agent, profile=None, agent_kwargs={})


def test_rows_carry_each_group_s_harness_and_the_engine_s_files(tmp_path: Path) -> None:
    model, template = _model(tmp_path)
    runner = Sampled()
    out = tmp_path / "dataset"
    controller = local_controller(
        tmp_path / "work", runner=runner, out=out, engine_files=(str(model), template)
    )
    engine = served_provenance(str(model), template)
    assert engine.weights_sha256 and engine.tokenizer_sha256  # hashes, not Nones
    runner.controller = controller

    async def run() -> None:
        rows = await _rows(controller, "first")
        for row in rows:
            assert row["provenance"] == _harness(row["agent"]).with_engine(engine).model_dump()
        assert sorted(row["agent"] for row in rows) == ["oracle", "terminus-2", "terminus-2"]
        assert _harness("oracle") != _harness("terminus-2")

        # After an update, the rows the new weights sampled name no weights: the
        # engine's first weights are not theirs. Its tokenizer and template still are.
        await controller.update_weights(WeightsRequest(path="/ckpt/step-1", version=1))
        for row in await _rows(controller, "trained"):
            provenance = Provenance.model_validate(row["provenance"])
            assert provenance == _harness(row["agent"]).with_engine(engine).without_weights()
            assert provenance.model_source is None and provenance.weights_sha256 is None
            assert provenance.tokenizer_sha256 == engine.tokenizer_sha256
            assert provenance.chat_template_sha256 == engine.chat_template_sha256
        # A call an update crossed: part of its tokens are the new weights'.
        runner.segments = ((1, 0), (2, 1))
        for row in await _rows(controller, "crossed"):
            assert row["provenance"]["weights_sha256"] is None
        controller.shutdown()

    asyncio.run(run())
    # The dataset `out:` holds the same rows.
    written = pq.read_table(out / "rollouts", columns=["provenance"]).to_pylist()
    hashes = [row["provenance"]["weights_sha256"] for row in written]
    assert Counter(hashes) == {engine.weights_sha256: 3, None: 6}


def test_an_engine_the_service_did_not_start_is_said_unknown(tmp_path: Path) -> None:
    runner = Sampled()
    controller = local_controller(tmp_path, runner=runner)
    runner.controller = controller
    for row in asyncio.run(_rows(controller, "r")):
        provenance = Provenance.model_validate(row["provenance"])
        assert provenance == _harness(row["agent"])  # the harness's half alone
        assert all(getattr(provenance, name) is None for name in ENGINE_FIELDS)
    controller.shutdown()


def test_a_row_without_tokens_names_no_weights(tmp_path: Path) -> None:
    """Which weights the engine held while a row that sampled nothing ran, the row
    cannot say (an engine that lived on past an earlier service may hold others)."""
    model, template = _model(tmp_path)
    controller = local_controller(tmp_path / "work", engine_files=(str(model), template))
    engine = served_provenance(str(model), template)
    for row in asyncio.run(_rows(controller, "r")):
        assert row["error_type"] == "agent_error"  # LocalRollouts: no turn
        assert (
            row["provenance"]
            == _harness(row["agent"]).with_engine(engine).without_weights().model_dump()
        )
    controller.shutdown()


def _deployed(engine_args: dict[str, Any], **capture: Any) -> dict[str, Any]:
    return {
        "engine": ServeApplicationSchema(import_path=OWN_ENGINE, args=engine_args),
        "capture": ServeApplicationSchema(
            import_path="harbor_ray.online.serve:build_capture",
            args={"engine": engine_args, **capture},
        ),
    }


@pytest.mark.parametrize(
    ("change", "known"),
    [
        ({}, True),
        ({"engine_url": "http://elsewhere:8000/v1"}, False),  # the proxy calls another
        ({"engine": None}, False),  # no engine app in this Serve
        ({"import_path": "mypkg:build"}, False),  # another builder's engine
        ({"args": {"model_id": "other"}}, False),  # another engine than the controller's
        ({"capture": None}, False),
    ],
)
def test_the_engine_is_known_only_as_this_yaml_s_own_app(
    change: dict[str, Any], known: bool
) -> None:
    engine_args = {"model_id": "m", "model_source": "/models/m"}
    args = ControllerArgs.model_validate({"engine": engine_args})
    deployed: dict[str, Any] = _deployed(
        engine_args, **{k: v for k, v in change.items() if k == "engine_url"}
    )
    for name in ("engine", "capture"):
        if name in change and change[name] is None:
            deployed[name] = None
    for field in ("import_path", "args"):
        if field in change:
            deployed["engine"] = deployed["engine"].model_copy(update={field: change[field]})
    assert own_engine(deployed, args) is known
