"""The fleet settings as a command's flags, made from `FleetSettings`' fields: a new
setting is a new field there (cluster/fleet.py) and nothing here.

`fleet_flags` gives a Typer command one flag per field, named and described by the
field, with the field's default, in place of the command's `fleet` parameter; the
command receives the values as the field types hold them, to make its request with.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

import typer

from harbor_ray.cluster.fleet import FleetSettings, fleet_flag, fleet_help
from harbor_ray.errors import StartError

__all__ = ["FROM_FLAGS", "FleetValues", "fleet_flags"]

FleetValues = Mapping[str, Any]
"""Each fleet setting's value as its field holds it, for `FleetSettings`' constructor
(or its subclass's, whose own checks may fill in a value first)."""

FROM_FLAGS: FleetValues = MappingProxyType({})
"""A command's `fleet` parameter's default, which `fleet_flags` replaces by the flags."""

_HINTS = typing.get_type_hints(FleetSettings)
_DEFAULTS = FleetSettings()


def _repeated(hint: Any) -> bool:
    """Whether a field of type `hint` is given by a repeatable flag (a tuple or a map)."""
    return typing.get_origin(hint) in (tuple, Mapping)


def _option(name: str) -> inspect.Parameter:
    """Setting `name` as a keyword parameter Typer makes a flag of."""
    hint, default = _HINTS[name], getattr(_DEFAULTS, name)
    flag = fleet_flag(name)
    if isinstance(default, bool):
        flag = f"{flag}/--no-{flag.removeprefix('--')}"  # a switch has its --no- form
    if _repeated(hint):
        hint, default = list[str] | None, None  # each item a flag; the default: none
    option = typer.Option(flag, help=fleet_help(name))
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[hint, option], default=default
    )


def _counts(flag: str, pairs: Iterable[str]) -> dict[str, int]:
    """`NAME=N` flags as a map (a map setting's flag is repeated, one pair each)."""
    counts: dict[str, int] = {}
    for pair in pairs:
        key, sep, text = pair.rpartition("=")
        if not sep or not key or not text.isdigit():
            raise StartError(f"{flag} takes NAME=N (N a whole number), not {pair!r}")
        counts[key] = int(text)
    return counts


def _value(name: str, given: Any) -> Any:
    """The flag's value `given` as setting `name`'s field holds it."""
    origin = typing.get_origin(_HINTS[name])
    if origin is tuple:
        return tuple(given or ())
    if origin is Mapping:
        return _counts(fleet_flag(name), given or ())
    return given


def fleet_flags[R](command: Callable[..., R]) -> Callable[..., R]:
    """`command` with a flag for each fleet setting where its `fleet: FleetValues`
    parameter was (and in its place in --help's order)."""
    names = [f.name for f in dataclasses.fields(FleetSettings)]
    # Evaluated: Typer reads a set __signature__ as it is, and the flags' help is in
    # the command's (postponed) annotations.
    signature = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name == "fleet":
            params += [_option(name) for name in names]
        else:
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def with_fleet(**given: Any) -> R:
        fleet = {name: _value(name, given.pop(name)) for name in names}
        return command(**given, fleet=fleet)

    with_fleet.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return with_fleet
