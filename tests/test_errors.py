"""One error hierarchy: every exception class harbor_ray defines hangs under
`HarborRayError`, and the tree drawn in `harbor_ray.errors`' docstring is that hierarchy
(names, parents and stdlib bases), so neither can drift from the other."""

import ast
import importlib
import inspect
import pickle
import re
from pathlib import Path

import pytest

import harbor_ray
import harbor_ray.errors
from harbor_ray.errors import (
    ClientError,
    FieldError,
    HarborRayError,
    OverCapacity,
    WeightUpdateError,
)

_PACKAGE = Path(harbor_ray.__file__).parent

# One tree line: the connectors give the depth; then the name, its stdlib bases in
# parentheses, and its meaning.
_LINE = re.compile(
    r"^(?P<indent>(?:│   |    )*)(?P<branch>[├└]── )?"
    r"(?P<name>_?[A-Z]\w*)(?: \((?P<bases>[\w, ]+)\))?  +\S"
)


def _module_names() -> list[str]:
    """Every module of the package, namespace subpackages (capture) included; the
    bundled sample tasks are task content, not harbor_ray code."""
    names = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        parts = path.relative_to(_PACKAGE.parent).with_suffix("").parts
        if "samples" in parts:
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_name in _module_names():
        module = importlib.import_module(module_name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module_name
            ):
                assert found.get(obj.__name__, obj) is obj, f"two classes named {obj.__name__}"
                found[obj.__name__] = obj
    return found


def _drawn_tree() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """name -> (parent in the tree, stdlib bases named after it)."""
    lines = (harbor_ray.errors.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("HarborRayError"))
    margin = lines[start].index("HarborRayError")
    tree: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    path: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = _LINE.match(line[margin:])
        assert match, f"not a tree line: {line!r}"
        depth = len(match["indent"]) // 4 + (1 if match["branch"] else 0)
        assert depth <= len(path), f"{match['name']} is drawn below nothing"
        del path[depth:]
        bases = tuple(b.strip() for b in (match["bases"] or "").split(","))
        tree[match["name"]] = (path[-1] if path else None, tuple(b for b in bases if b))
        path.append(match["name"])
    return tree


def test_module_walk_finds_the_classes_of_namespace_subpackages():
    found = _defined_exceptions()
    assert {"SessionGone", "AgentRequestError", "SandboxError", "DatasetError"} <= set(found)


def test_every_exception_class_derives_from_harbor_ray_error():
    outside = sorted(
        name for name, cls in _defined_exceptions().items() if not issubclass(cls, HarborRayError)
    )
    assert outside == []


def test_the_docstring_tree_is_the_hierarchy():
    found = _defined_exceptions()
    tree = _drawn_tree()
    assert sorted(tree) == sorted(found)
    for name, (parent, stdlib) in tree.items():
        cls = found[name]
        family = [b.__name__ for b in cls.__bases__ if issubclass(b, HarborRayError)]
        others = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, HarborRayError))
        if cls is HarborRayError:
            assert (parent, others) == (None, ("Exception",))
        else:
            assert family == [parent], f"{name} is drawn under {parent}, derives from {family}"
            assert stdlib == others, f"{name} is drawn with bases {stdlib}, has {others}"


def test_every_error_takes_its_message_first_and_the_rest_by_keyword():
    """One constructor shape, so a raise site reads the same whichever class it raises."""
    for name, cls in _defined_exceptions().items():
        if "__init__" not in vars(cls):
            continue
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        if name.startswith("_") and params[0].name != "message":
            continue  # a private signal carrying something else (a reply), not a message
        assert params[0].name == "message", f"{name} takes {params[0].name} first"
        rest = [p.name for p in params[1:] if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert rest == [], f"{name} takes {rest} by position"


@pytest.mark.parametrize(
    "error",
    [
        FieldError("no task 'x'", status=400, field="task"),
        OverCapacity("at capacity", retry_after_s=5),
        WeightUpdateError("replica 1 timed out", replicas=[{"replica": "r1", "ok": False}]),
        ClientError("stale", status=409, field="version", replicas=[{"replica": "r1"}]),
        HarborRayError("plain"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling_with_their_attributes(error: HarborRayError) -> None:
    """Ray pickles an error raised in an actor for its caller; one whose constructor
    takes more than the message must come back whole, not as a TypeError."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)


# Where a bare stdlib error may still be raised on purpose, by (module, function): each
# is a module's own signal, caught above it, or a limit no real input reaches; never what
# a user is left to read. A caller's programming error is an `assert` with a message.
# Inside a pydantic validator a ValueError is pydantic's protocol (it becomes the field's
# ValidationError), so those are recognised by their decorator rather than listed.
_STDLIB_RAISES_ALLOWED = {
    ("engine/checkpoints.py", "_header_shapes"): "a signal caught below, as a CheckpointError",
    ("capture/proxy/certify.py", "_top_logprobs"): "caught by its caller, a CertificationError",
    ("trials/sandbox/relay.py", "_listen"): "caught by main: harbor_ray builds the relay's argv",
    ("client/routes.py", "_health"): "caught by the call's parse step, as a ClientError",
    ("report/tokenizer.py", "_entry"): "a Mapping's KeyError: an id outside the vocab",
    ("data/encode.py", "_list_array"): "over 2**31 values in one column: no real rollout",
}

_STDLIB_ERRORS = {"ValueError", "RuntimeError", "TypeError", "KeyError", "LookupError"}
_VALIDATORS = {"field_validator", "model_validator"}


def _bare_raises(tree: ast.AST) -> list[tuple[str, int]]:
    """(enclosing function, line) of every `raise <stdlib error>` outside a validator."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str, in_validator: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                decorators = {
                    ast.unparse(d).split("(")[0].rsplit(".", 1)[-1] for d in child.decorator_list
                }
                visit(child, child.name, bool(decorators & _VALIDATORS))
                continue
            if isinstance(child, ast.Raise) and child.exc is not None and not in_validator:
                raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(raised, ast.Name) and raised.id in _STDLIB_ERRORS:
                    found.append((function, child.lineno))
            visit(child, function, in_validator)

    visit(tree, "<module>", False)
    return found


def test_user_facing_errors_are_harbor_ray_errors():
    """A user is told what failed by a class of the tree, not a bare ValueError; the
    stdlib errors left are the allowlisted programming errors and signals."""
    unlisted, used = [], set()
    for path in sorted(_PACKAGE.rglob("*.py")):
        module = path.relative_to(_PACKAGE).as_posix()
        if module.startswith("samples/"):
            continue
        for function, line in _bare_raises(ast.parse(path.read_text(), str(path))):
            if (module, function) in _STDLIB_RAISES_ALLOWED:
                used.add((module, function))
            else:
                unlisted.append(f"{module}:{line} in {function}")
    assert unlisted == [], "raise a class of harbor_ray.errors (or allowlist it, saying why)"
    assert sorted(set(_STDLIB_RAISES_ALLOWED) - used) == [], "allowlisted, raises none"
