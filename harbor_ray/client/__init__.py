"""The online controller's typed client: `Client` (blocking) and `AsyncClient`, over its
HTTP API, with the wire models of `harbor_ray.online.wire` as replies; and the adapter
from delivered groups to TRL's records: one per rollout (`group_samples`, GRPO's) or
one per model call (`group_call_records`), and `mask_stale`, the per-token staleness
mask."""

from harbor_ray.client.calls import Retry
from harbor_ray.client.clients import AsyncClient, Client
from harbor_ray.client.trl import group_call_records, group_samples, mask_stale, trl_columns
from harbor_ray.errors import ClientError

__all__ = [
    "AsyncClient",
    "Client",
    "ClientError",
    "Retry",
    "group_call_records",
    "group_samples",
    "mask_stale",
    "trl_columns",
]
