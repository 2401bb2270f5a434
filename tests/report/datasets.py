"""Small datasets on disk for the report tests, written by the real writer."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.writer import DatasetWriter
from harbor_ray.report.tables import DatasetTables, read_tables
from tests.capture.turns_factory import follow, turn
from tests.data.rollouts import broken_session, dead_rollout, rich_session, rollout


def sample_records() -> list[RolloutRecord]:
    """Three tasks: a rich capture (ok, reward 1), a broken one (FATAL, reward 0), and a
    rollout whose sandbox never started (no capture, no reward)."""
    return [
        rollout("a1", rich_session()),
        rollout("b1", broken_session(), reward=0.0),
        dead_rollout("c1"),
    ]


def write_dataset(out: Path, records: list[RolloutRecord]) -> Path:
    writer = DatasetWriter(out, {"agent": "terminus-2", "run": "t", "started_at": 1.0})
    for record in records:
        writer.add(record)
    writer.close(2.0)
    return out


def sample_tables(tmp_path: Path) -> DatasetTables:
    return read_tables(write_dataset(tmp_path / "out", sample_records()))


def with_policy_versions(
    tables: DatasetTables, oldest: list[int | None], newest: list[int | None]
) -> DatasetTables:
    """`tables` with the policy versions of an online run that updated its weights."""
    rollouts = tables.rollouts
    for name, values in (("policy_version_min", oldest), ("policy_version_max", newest)):
        column = pa.array(values, pa.int64())
        index = rollouts.schema.get_field_index(name)
        rollouts = (
            rollouts.set_column(index, name, column)
            if index >= 0
            else rollouts.append_column(name, column)
        )
    return DatasetTables(rollouts, tables.turns, tables.sequences, tables.manifest)


def byte_level_tokenizer(directory: Path) -> Path:
    """A small byte-level BPE tokenizer (GPT-2's alphabet, one merge: "é" is one id, an
    emoji four) and a special `<|end|>`, saved as `directory/tokenizer.json`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)} | {"Ã©": len(alphabet)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[("Ã", "©")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|end|>"])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def worded_rollout(
    rollout_id: str, model: str, tokenizer: Path, replies: list[str]
) -> RolloutRecord:
    """A linear rollout whose sampled ids are `tokenizer`'s encoding of `replies`, one a
    turn, served as `model`."""
    from tokenizers import Tokenizer

    encode = Tokenizer.from_file(str(tokenizer / "tokenizer.json")).encode
    turns = [turn(0, encode("hi").ids, encode(replies[0]).ids)]
    for index, reply in enumerate(replies[1:], start=1):
        turns.append(follow(turns[-1], index, encode(" ok").ids, encode(reply).ids))
    return rollout(rollout_id, turns, model=model)
