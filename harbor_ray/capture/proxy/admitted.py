"""A model call admitted to its session's budget, its engine reply, and the steps that
deliver one (`CallSteps`: the pipeline's, as delivery.py sees them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from harbor_ray.capture.core.completion import Completion
from harbor_ray.capture.core.continuation import Continuation, ContinuationBase, Conversation
from harbor_ray.capture.core.detect import CallRoute
from harbor_ray.capture.core.dialects.base import EngineCall
from harbor_ray.capture.core.native_request import NativeRequest

if TYPE_CHECKING:
    from harbor_ray.capture.proxy.settings import CaptureSettings

__all__ = ["Admitted", "CallSteps", "EngineReply"]


@dataclass(frozen=True)
class Admitted:
    """A model call that holds a slot of its session's budget."""

    session_id: str
    index: int
    route: CallRoute
    call: EngineCall
    payload: dict[str, Any]
    messages_json: bytes  # the payload's messages, encoded once for the record
    auxiliary: bool = False  # a side call (capture.core.auxiliary)
    conversation: Conversation | None = None  # None: its prompt is never stitched
    base: ContinuationBase | None = None  # the recorded turn it continues
    # The request for a hosted upstream, in its own format (capture/proxy/hosted.py).
    native: NativeRequest | None = None


@dataclass(frozen=True)
class EngineReply:
    completion: Completion
    message: dict[str, Any]  # the engine reply's message, as recorded
    started: float
    version: int | None  # the policy version when the call was forwarded
    continuation: Continuation | None = None
    retries: int = 0  # times the call was sent again after a 429 (pipeline.py)


class CallSteps(Protocol):
    """What delivering an admitted call needs of the pipeline that admitted it."""

    settings: CaptureSettings

    async def generate(self, admitted: Admitted) -> Completion: ...

    async def complete(self, admitted: Admitted) -> EngineReply: ...

    async def record(self, admitted: Admitted, reply: EngineReply) -> None: ...

    async def withdraw(self, admitted: Admitted) -> None: ...
