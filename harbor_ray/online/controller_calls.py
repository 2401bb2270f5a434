"""What the controller's HTTP app and its MCP tools need of the controller: one awaitable
call per route. The `Controller` in this process and `ActorController` (the controller
actor behind Ray) both answer it."""

from __future__ import annotations

from typing import Protocol

from harbor_ray.online.wire import (
    AckReply,
    CancelReply,
    Group,
    PolicyReply,
    StatsReply,
    SubmitReply,
    SubmitRequest,
    WeightsReply,
    WeightsRequest,
)

__all__ = ["ControllerCalls"]


class ControllerCalls(Protocol):
    async def submit(self, request: SubmitRequest) -> SubmitReply: ...
    async def groups(self, max_groups: int, wait_s: float) -> list[Group]: ...
    async def ack(self, group_ids: list[str]) -> AckReply: ...
    async def cancel(self, group_id: str) -> CancelReply: ...
    async def update_weights(self, request: WeightsRequest) -> WeightsReply: ...
    async def policy(self) -> PolicyReply: ...
    async def stats(self) -> StatsReply: ...
    async def run_one(self, request: SubmitRequest) -> Group: ...
    async def tasks(self, dataset: str | None) -> list[str]: ...
