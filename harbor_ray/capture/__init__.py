"""The capture layer: what agents send, what the engine saw and sampled, and the verdict.

`core/` (pure: no Ray, no HTTP stack, no Harbor, no clock; `CORE` lists its modules,
and a test imports them in a fresh interpreter to hold that line): `dialects/` (the four
wire dialects), `detect`, `normalize`, `capture_level` (what a call records),
`sampling`, `completion`, `turn` (one recorded call), `prefixes` and `graph` (exact
prefix linking), `continuation` (a continued conversation's prompt from the ids it
already has), `auxiliary` (an agent's side calls), `token_buffers` (a session's turns
with their ids held once) and `address_equality` (equality proved from where arrays
live), `findings` (validation), `record` (a closed session), `export` (its JSON view),
`session_info` (what opening a session gives its rollout), `budget`, `count_tokens`,
`session_keys`, `sse`, `models_list`, `policy_segments` (which version sampled which
tokens of a call), `journal` (a host's turn journal as records).

`proxy/`, the edge: `app` (the Starlette proxy), `upstream` and `http1` (the engine
client), `certify`, `session` (session stores), `journal_file` (a host's journal on disk),
`server`, `local` (the proxy in this
process), `heap`, `fast_json`, `head_limit`, `fake_engine` (a stand-in engine for tests
and benchmarks).
"""

from harbor_ray.capture.core.findings import Code, Finding, Severity
from harbor_ray.capture.core.graph import Role, RolloutGraph, TrainingSequence, build_graph
from harbor_ray.capture.core.record import CaptureCounts, ClosedCapture, close_capture
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.turn import TurnRecord

CORE = (
    "dialects", "detect", "normalize", "sampling", "completion", "turn", "prefixes",
    "graph", "continuation", "findings", "record", "export", "budget", "count_tokens",
    "session_keys", "sse", "models_list", "auxiliary", "token_buffers", "address_equality",
    "session_info", "capture_level", "policy_segments", "journal", "upstream_profile",
    "native_request", "native_reply",
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
