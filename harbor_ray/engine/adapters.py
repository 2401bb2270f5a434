"""Which LoRA adapter a replica serves as its policy, and which it may remove: pure.

A LoRA engine's weight updates load each new version as an adapter under a fresh name
(`<model_id>@v<N>-<salt>`) and switch to it once every replica has it
(`harbor_ray.engine.weights.WeightUpdater`). `AdapterBook` is one replica's account:
the adapters loaded, the current one, and the calls that use each. A call that names
the base `model_id` is handed the current adapter for its whole life (vLLM binds a
request to its adapter), so its tokens all have that adapter's version; an adapter that
is neither current nor used by a call is handed back for removal, which frees its slot
(vLLM's `max_loras`). `harbor_ray.engine.versions.VersionedServer` keeps one.
"""

from __future__ import annotations

from dataclasses import dataclass

from harbor_ray.errors import WeightsRefusedError


def adapter_name(model_id: str, tag: str) -> str:
    """The name an adapter is served under: the base name, then `@` and the updater's
    tag (`v<N>-<salt>`), so each load has a name no earlier load had."""
    return f"{model_id}@{tag}"


@dataclass
class _Loaded:
    version: str
    calls: int = 0


class AdapterBook:
    """One replica's adapters, by name: loaded, current, and in use."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.current: str | None = None  # None: the base model, before the first update
        self._loaded: dict[str, _Loaded] = {}

    def loaded(self, tag: str, version: str) -> str:
        """Record an adapter loaded for `version`; its name."""
        name = adapter_name(self.model_id, tag)
        self._loaded[name] = _Loaded(version)
        return name

    def switch(self, tag: str | None) -> list[str]:
        """Serve the adapter of `tag` (None: the base model) to new calls; the adapters
        now removable."""
        name = None if tag is None else adapter_name(self.model_id, tag)
        if name is not None and name not in self._loaded:
            raise WeightsRefusedError(f"adapter {name} is not loaded on this replica")
        self.current = name
        return self.removable()

    def begin(self, model: str) -> str | None:
        """A call for `model` begins: the adapter it is to use (counted as in use until
        `end`), or None if it names no adapter of this book (the base model before any
        update, or a name the caller chose)."""
        name = self.current if model == self.model_id else model
        if name is None or name not in self._loaded:
            return None
        self._loaded[name].calls += 1
        return name

    def end(self, name: str) -> list[str]:
        """The call that `begin` gave `name` ended; the adapters now removable."""
        loaded = self._loaded.get(name)
        if loaded is not None:
            loaded.calls -= 1
        return self.removable()

    def version_of(self, name: str) -> str | None:
        loaded = self._loaded.get(name)
        return None if loaded is None else loaded.version

    def removable(self) -> list[str]:
        return [
            name
            for name, loaded in self._loaded.items()
            if name != self.current and loaded.calls <= 0
        ]

    def removed(self, name: str) -> None:
        self._loaded.pop(name, None)

    def drop(self, tag: str) -> str | None:
        """Forget the adapter of `tag` unless it is current or in use (an update that
        failed on another replica); its name if it is to be removed."""
        name = adapter_name(self.model_id, tag)
        return name if name in self.removable() else None
