"""The harness's half of a row's provenance: which agent release ran, and a hash of its
configuration as the run gave it (`Provenance.harness_version`, `_config_sha256`).

The configuration is what the run chose for the agent (its name, the dialect it speaks,
its keyword arguments), not the wiring each rollout adds (the proxy's address, the
session's key), which differs from rollout to rollout and says nothing about the agent.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from typing import Any

from harbor_ray.data.result import Provenance
from harbor_ray.trials.agent_pins import PINS

__all__ = ["harness_provenance"]


def harness_provenance(
    agent: str, *, profile: str | None, agent_kwargs: Mapping[str, Any]
) -> Provenance:
    """The agent's release (its pinned CLI's, else the Harbor that runs it) and the
    sha256 of its configuration as canonical JSON."""
    pin = PINS.get(agent)
    version = (
        f"{agent} {pin.version}"
        if pin is not None
        else f"harbor {importlib.metadata.version('harbor')}"
    )
    config = {"agent": agent, "profile": profile, "agent_kwargs": dict(agent_kwargs)}
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return Provenance(
        harness_version=version,
        harness_config_sha256=hashlib.sha256(canonical.encode()).hexdigest(),
    )
