from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

import harbor_ray.data
from harbor_ray.data.schema import SCHEMA_VERSION, TABLES

SCHEMA_MD = Path(harbor_ray.data.__file__).with_name("SCHEMA.md")
ROW = re.compile(r"^\| `(?P<name>[\w.]+)` \| `(?P<type>[^`]+)` \|\s*(?P<null>yes)?\s*\| .+ \|$")


def documented() -> dict[str, dict[str, tuple[str, bool]]]:
    """Per `## name/` section of SCHEMA.md: column -> (type, nullable)."""
    sections: dict[str, dict[str, tuple[str, bool]]] = {}
    current: dict[str, tuple[str, bool]] | None = None
    for line in SCHEMA_MD.read_text().splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip().rstrip("/"), {})
        elif current is not None and (row := ROW.match(line)):
            current[row["name"]] = (row["type"], row["null"] == "yes")
    return sections


def spelled(type_: pa.DataType) -> str:
    """A type as SCHEMA.md spells it."""
    if pa.types.is_list(type_):
        return f"list<{spelled(type_.value_type)}>"
    if pa.types.is_map(type_):
        return f"map<{spelled(type_.key_type)}, {spelled(type_.item_type)}>"
    if pa.types.is_struct(type_):
        return "struct"
    return str(type_)


def columns(schema: pa.Schema) -> dict[str, tuple[str, bool]]:
    """Every column, and every struct field as `column.field` (through lists too)."""
    out: dict[str, tuple[str, bool]] = {}
    for field in schema:
        out[field.name] = (spelled(field.type), field.nullable)
        inner = field.type.value_type if pa.types.is_list(field.type) else field.type
        if pa.types.is_struct(inner):
            for sub in inner:
                out[f"{field.name}.{sub.name}"] = (spelled(sub.type), sub.nullable)
    return out


def test_schema_md_documents_every_column_and_nothing_else() -> None:
    sections = documented()
    assert {name for name, rows in sections.items() if rows} == {name for name, _ in TABLES}
    for name, schema in TABLES:
        assert sections[name] == columns(schema), name


def test_one_version_everywhere() -> None:
    assert SCHEMA_MD.read_text().splitlines()[0].endswith(f"schema version {SCHEMA_VERSION}")
    for _, schema in TABLES:
        assert schema.metadata == {b"harbor_ray.schema_version": str(SCHEMA_VERSION).encode()}
        assert schema.field("rollout_id").type == pa.string()


def test_the_public_surface() -> None:
    assert sorted(harbor_ray.data.__all__) == sorted(
        [
            "SCHEMA_VERSION",
            "DatasetWriter",
            "RolloutRecord",
            "encode_record",
            "read_rollouts",
            "read_sequences",
            "read_turns",
            "rebuild_prompts",
            "rollout_samples",
            "call_records",
            "turn_records",
        ]
    )
    for name in harbor_ray.data.__all__:
        assert hasattr(harbor_ray.data, name)
