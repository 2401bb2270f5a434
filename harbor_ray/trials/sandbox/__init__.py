"""Local sandboxes for Harbor trials on machines without a container engine.

`BwrapEnvironment` is a Harbor environment built on bubblewrap; plug it in with
`EnvironmentConfig(import_path="harbor_ray.trials.sandbox.bwrap:BwrapEnvironment")`.
`find_problems()` says what this machine lacks to run it.
"""

from harbor_ray.errors import ExecTimeoutError, SandboxError, SandboxUnavailableError
from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment, shares_host_network
from harbor_ray.trials.sandbox.preflight import find_problems

__all__ = [
    "BwrapEnvironment",
    "ExecTimeoutError",
    "SandboxError",
    "SandboxUnavailableError",
    "find_problems",
    "shares_host_network",
]
