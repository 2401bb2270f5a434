"""harbor_ray's modules import each other in layers, without cycles.

The rules are the layers table of docs/architecture.md, read here, so the doc and the
check cannot drift apart. The graph is built from the source (ast, nothing imported):
every import statement counts, at a module's top, inside a function or under
`TYPE_CHECKING`, with relative imports resolved. `from package import name` reads the
package, so it is an import of the package (and of `package.name` when that is a
module): a package's `__init__` that imports its modules and a module that imports
from its package's `__init__` are a cycle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "harbor_ray"
DOC = ROOT / "docs" / "architecture.md"
# The table's name for the package's own `__init__`.
PACKAGE_INIT = "__init__"

Graph = Mapping[str, frozenset[str]]
Rules = Mapping[str, frozenset[str]]


def package_modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name: the .py files in its directories that
    are packages themselves (task samples and other data are not)."""
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        directories = [package.parent.joinpath(*parts[:end]) for end in range(1, len(parts))]
        if all((directory / "__init__.py").is_file() for directory in directories):
            name = parts[:-1] if parts[-1] == "__init__" else parts
            modules[".".join(name)] = path
    return modules


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name a module's import statements reach, relative ones resolved."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def owning_module(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module a dotted name is or lies in (`a.b.Name` -> `a.b`); None if not ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> dict[str, frozenset[str]]:
    """Each module of the package -> the package's modules it imports."""
    modules = package_modules(package)
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        owners = (owning_module(imported, modules) for imported in imported_names(name, path))
        graph[name] = frozenset(owner for owner in owners if owner is not None and owner != name)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The groups of nodes that reach each other (each a cycle or several), sorted."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {
        frozenset(other for other in reach[node] if node in reach[other])
        for node in graph
        if node in reach[node]
    }
    return sorted(sorted(group) for group in groups)


def _reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def layer_rules(doc: str) -> dict[str, frozenset[str]]:
    """The layers table of the architecture doc: each part -> the names it may import."""
    section = doc.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = _cells(rows[0])
    column = header.index("may import")
    rules: dict[str, frozenset[str]] = {}
    for row in rows[2:]:
        cells = _cells(row)
        (part,) = re.findall(r"`([^`]+)`", cells[0])
        rules[part] = frozenset(re.findall(r"`([^`]+)`", cells[column]))
    return rules


def module_map(doc: str) -> dict[str, frozenset[str]]:
    """The Modules section: each part's line -> the names it gives in backticks (a
    subpackage as `name/`, read as `name`)."""
    section = doc.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    entries = re.findall(r"^- `([^`]+)`:(.*?)(?=^- |^$|\Z)", section, re.M | re.S)
    return {
        part: frozenset(name.rstrip("/") for name in re.findall(r"`([^`]+)`", text))
        for part, text in entries
    }


def unmapped_modules(
    modules: Iterable[str], rules: Rules, names: Mapping[str, frozenset[str]], package: str
) -> list[str]:
    """Each module some part of whose dotted name (below its part) its part's line of the
    module map does not name; and each line whose part the table lacks."""
    found = [
        f"the map's line `{part}` is no part of the table" for part in names if part not in rules
    ]
    for module in sorted(modules):
        part = part_of(module, rules, package)
        if part is None or module == module_of(part, package):
            continue  # a module without a part fails the test above; a part's own module
        below = module.removeprefix(module_of(part, package) + ".").split(".")
        if not set(below) <= names.get(part, frozenset()):
            found.append(f"{module} ({part})")
    return found


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def module_of(part: str, package: str) -> str:
    """A table name as a module name (`capture.core` -> `harbor_ray.capture.core`)."""
    return package if part == PACKAGE_INIT else f"{package}.{part}"


def within(module: str, name: str) -> bool:
    return module == name or module.startswith(f"{name}.")


def part_of(module: str, rules: Rules, package: str) -> str | None:
    """The table's row a module belongs to: the longest name that contains it."""
    if module == package:
        return PACKAGE_INIT if PACKAGE_INIT in rules else None
    parts = [
        part for part in rules if part != PACKAGE_INIT and within(module, module_of(part, package))
    ]
    return max(parts, key=len, default=None)


def layer_violations(graph: Graph, rules: Rules, package: str) -> list[str]:
    """Each import that crosses to a part its own part may not import."""
    found = []
    for module, imported in sorted(graph.items()):
        part = part_of(module, rules, package)
        for target in sorted(imported):
            if part_of(target, rules, package) == part:
                continue
            allowed = [module_of(name, package) for name in rules.get(part or "", ())]
            if not any(within(target, name) for name in allowed):
                found.append(f"{module} ({part}) imports {target}")
    return found


def rule_graph(rules: Rules, package: str) -> dict[str, frozenset[str]]:
    """Each part -> the parts it may import from."""
    return {
        part: frozenset(part_of(module_of(name, package), rules, package) or name for name in names)
        for part, names in rules.items()
    }


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    return import_graph(PACKAGE)


@pytest.fixture(scope="module")
def rules() -> dict[str, frozenset[str]]:
    return layer_rules(DOC.read_text())


def test_no_module_imports_itself_back(graph: Graph) -> None:
    assert cycles(graph) == []


def test_every_import_follows_the_layers(graph: Graph, rules: Rules) -> None:
    assert layer_violations(graph, rules, PACKAGE.name) == []


def test_the_layers_do_not_cycle(rules: Rules) -> None:
    assert cycles(rule_graph(rules, PACKAGE.name)) == []


def test_every_module_has_a_part_and_every_name_a_module(graph: Graph, rules: Rules) -> None:
    assert [module for module in graph if part_of(module, rules, PACKAGE.name) is None] == []
    named = set(rules).union(*rules.values())
    assert (
        sorted(
            name
            for name in named
            if not any(within(module, module_of(name, PACKAGE.name)) for module in graph)
        )
        == []
    )


def test_the_module_map_names_every_module(graph: Graph, rules: Rules) -> None:
    names = module_map(DOC.read_text())
    assert unmapped_modules(graph, rules, names, PACKAGE.name) == []


# The checks above on a package made for them: each can fail.


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_cycle_through_a_function_and_a_relative_import_is_found(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/one.py": "def f():\n    from ..b import two\n",
            "pkg/b/__init__.py": "",
            "pkg/b/two.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.a.one import f\n",
            "pkg/b/three.py": "import pkg.b.two\n",
            "pkg/data/sample/run.py": "import pkg.a.one\n",  # not a package: not a module
        },
    )
    graph = import_graph(package)
    assert set(graph) == {"pkg", "pkg.a", "pkg.a.one", "pkg.b", "pkg.b.two", "pkg.b.three"}
    assert cycles(graph) == [["pkg.a.one", "pkg.b.two"]]


def test_importing_from_a_package_init_that_imports_you_is_a_cycle(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.client import Client\n",
            "pkg/client.py": "from pkg import routes\nClient = 1\n",
            "pkg/routes.py": "",
        },
    )
    assert cycles(import_graph(package)) == [["pkg", "pkg.client"]]


def test_a_sideways_import_and_a_cycle_of_layers_are_found(tmp_path: Path) -> None:
    doc = (
        "# Doc\n\n## Layers\n\n| part | what | may import |\n|---|---|---|\n"
        "| `core` | records | |\n"
        "| `edge` | serving | `core`, `low.types` |\n"
        "| `low` | helpers | `core` |\n"
        "| `__init__` | the facade | `edge` |\n\n## Next\n\n| a | b |\n"
    )
    rules = layer_rules(doc)
    assert rules == {
        "core": frozenset(),
        "edge": frozenset({"core", "low.types"}),
        "low": frozenset({"core"}),
        "__init__": frozenset({"edge"}),
    }
    graph = {
        "pkg": frozenset({"pkg.edge.app"}),
        "pkg.core.record": frozenset(),
        "pkg.edge.app": frozenset({"pkg.core.record", "pkg.low.types", "pkg.edge.http"}),
        "pkg.edge.http": frozenset({"pkg.low.io"}),
        "pkg.low.types": frozenset(),
        "pkg.low.io": frozenset({"pkg.edge.http"}),
    }
    assert layer_violations(graph, rules, "pkg") == [
        "pkg.edge.http (edge) imports pkg.low.io",
        "pkg.low.io (low) imports pkg.edge.http",
    ]
    looped = {**rules, "core": frozenset({"low"})}
    assert cycles(rule_graph(looped, "pkg")) == [["core", "low"]]


def test_a_module_left_off_the_map_and_a_stray_line_are_found() -> None:
    doc = (
        "# Doc\n\n## Modules\n\nThe map.\n\n"
        "- `core`: `sub/` (`one`), `record`\n"
        "- `edge`: `app`\n  (wrapped) `http`\n"
        "- `gone`: `old`\n\n## Next\n\n- `later`: `x`\n"
    )
    names = module_map(doc)
    assert names == {
        "core": frozenset({"sub", "one", "record"}),
        "edge": frozenset({"app", "http"}),
        "gone": frozenset({"old"}),
    }
    rules = {"core": frozenset(), "edge": frozenset({"core"}), "solo": frozenset()}
    modules = [
        "pkg.core",
        "pkg.core.record",
        "pkg.core.sub",
        "pkg.core.sub.one",
        "pkg.core.sub.two",
        "pkg.edge.app",
        "pkg.edge.http",
        "pkg.edge.io",
        "pkg.solo",
    ]
    assert unmapped_modules(modules, rules, names, "pkg") == [
        "the map's line `gone` is no part of the table",
        "pkg.core.sub.two (core)",
        "pkg.edge.io (edge)",
    ]
