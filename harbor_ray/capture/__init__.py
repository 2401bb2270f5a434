"""The capture layer: what agents send, what the engine saw and sampled, and the verdict.

`core/` is pure: no Ray, no HTTP stack, no Harbor, no clock. `CORE` lists its modules,
and a test imports them in a fresh interpreter to hold that line. `proxy/` is the edge.
Every module of both is named in docs/architecture.md ("Modules"), the package's one map.
"""

from harbor_ray.capture.core.findings import Code, Finding, Severity
from harbor_ray.capture.core.graph import Role, RolloutGraph, TrainingSequence, build_graph
from harbor_ray.capture.core.record import CaptureCounts, ClosedCapture, close_capture
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.turn import TurnRecord

CORE = (
    "dialects",
    "detect",
    "normalize",
    "sampling",
    "completion",
    "turn",
    "prefixes",
    "graph",
    "continuation",
    "findings",
    "record",
    "export",
    "budget",
    "count_tokens",
    "session_keys",
    "sse",
    "models_list",
    "auxiliary",
    "token_buffers",
    "address_equality",
    "session_info",
    "capture_level",
    "policy_segments",
    "journal",
    "upstream_profile",
    "native_request",
    "native_reply",
)

__all__ = [
    "CORE",
    "CaptureCounts",
    "ClosedCapture",
    "Code",
    "Finding",
    "Role",
    "RolloutGraph",
    "Sampling",
    "Severity",
    "TrainingSequence",
    "TurnRecord",
    "build_graph",
    "close_capture",
]
