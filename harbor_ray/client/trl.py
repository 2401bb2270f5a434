"""Delivered groups as TRL's per-turn records, for a GRPOTrainer `rollout_func`.

The records are `harbor_ray.data.trl`'s (prompt ids, completion ids, per-token logprobs,
env_mask, reward, where each came from), made by the same code from the groups' turns,
plus the `group_id` each came from: the group is GRPO's, so a trainer that normalises
rewards within a group finds it there. `trl_columns` turns them column-wise, as a
`rollout_func` returns them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harbor_ray.data.trl import rows_to_trl_records, trl_columns
from harbor_ray.online.wire import Group

__all__ = ["trl_columns", "trl_records"]


def trl_records(groups: Iterable[Group], *, include_discarded: bool = False,
                only_ok: bool = True) -> list[dict[str, Any]]:
    """One record per model call of every group's rollouts, group by group in turn
    order; calls without ids, abandoned retries (unless `include_discarded`) and rows of
    unusable rollouts (unless `only_ok` is False) are left out, as from a dataset."""
    return [
        {**record, "group_id": group.group_id}
        for group in groups
        for record in rows_to_trl_records(group.turns, include_discarded=include_discarded,
                                          only_ok=only_ok)
    ]
