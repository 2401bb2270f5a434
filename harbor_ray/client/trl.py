"""Delivered groups as TRL's records, for a GRPOTrainer `rollout_func`.

`group_samples`: one sample per rollout (`harbor_ray.data.rollout_samples`), group by
group: what GRPO trains on. `group_call_records`: one record per model call
(`harbor_ray.data.trl`'s, from the groups' turns). Both carry the `group_id` each came
from: the group is GRPO's. `trl_columns` turns records column-wise, as a `rollout_func`
returns them. `mask_stale` takes a sample's tokens past a staleness bound out of its
`env_mask` (by its `policy_versions`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harbor_ray.data.token_versions import mask_stale
from harbor_ray.data.trl import call_records_from_rows, rollout_samples, trl_columns
from harbor_ray.online.wire import Group

__all__ = ["group_call_records", "group_samples", "mask_stale", "trl_columns"]


def group_samples(groups: Iterable[Group], *, filler_id: int = 0) -> list[dict[str, Any]]:
    """One sample per rollout of every group, group by group in the order of each
    group's rollouts, with the `group_id` it came from (`rollout_samples`' fields)."""
    return [
        {**sample, "group_id": group.group_id}
        for group in groups
        for sample in rollout_samples(group.rollouts, group.sequences, filler_id=filler_id)
    ]


def group_call_records(
    groups: Iterable[Group], *, include_discarded: bool = False, only_ok: bool = True
) -> list[dict[str, Any]]:
    """One record per model call of every group's rollouts, group by group in turn
    order; calls without ids, abandoned retries (unless `include_discarded`) and rows of
    unusable rollouts (unless `only_ok` is False) are left out, as from a dataset."""
    return [
        {**record, "group_id": group.group_id}
        for group in groups
        for record in call_records_from_rows(
            group.turns, include_discarded=include_discarded, only_ok=only_ok
        )
    ]
