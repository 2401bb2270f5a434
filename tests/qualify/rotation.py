"""Which cells (agent x profile) CI runs at qualification level 2 today: a rotation.

Level 2 for all ten first agents took about 250 s of CI's hour (level 1 for all ten
about 60 s), so CI runs level 1 for every agent and level 2 for `LEVEL_2_SIZE` cells a
day: the cost CI paid when it rotated four agents' default cells, now spread over every
profile of every agent. The cells are in a fixed order (`QUALIFIED`'s agents, all but any
in LEVEL_2_BLOCKED, each with its profiles, its default first); the window moves by
`LEVEL_2_SIZE` each UTC day, so with 52 cells every cell runs at least once in any
`PERIOD_DAYS` (13) consecutive days, and a rerun on the same day runs the same cells.
Thirteen days, not seven: a full pass weekly would take eight cells a day, twice the
level-2 time CI has today; `qualify --profile all --llm-url URL` runs a full pass by
hand whenever one is due sooner (before a release, after a Harbor upgrade). The test's
id names the cells, so CI's log shows which ran.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence

from harbor_ray.qualify.harnesses import LEVEL_2_BLOCKED, QUALIFIED
from harbor_ray.trials.agents import profiles

LEVEL_2_SIZE = 4
# The agents the rotation runs at level 2, in their fixed order.
AT_LEVEL_2 = tuple(agent for agent in QUALIFIED if agent not in LEVEL_2_BLOCKED)
# Their cells, in the rotation's order.
CELLS_AT_LEVEL_2: tuple[tuple[str, str], ...] = tuple(
    (agent, profile) for agent in AT_LEVEL_2 for profile in profiles(agent)
)
# Days in which the rotation runs every cell.
PERIOD_DAYS = math.ceil(len(CELLS_AT_LEVEL_2) / LEVEL_2_SIZE)


def rotating_subset[T](items: Sequence[T], day: int, size: int = LEVEL_2_SIZE) -> tuple[T, ...]:
    """`size` of `items` (all when there are no more), the window for `day` (days since
    the epoch), in the items' order."""
    if size >= len(items):
        return tuple(items)
    start = day * size % len(items)
    chosen = {(start + i) % len(items) for i in range(size)}
    return tuple(item for i, item in enumerate(items) if i in chosen)


def today() -> int:
    """Days since the epoch, UTC: the rotation's clock."""
    return (datetime.datetime.now(datetime.UTC).date() - datetime.date(1970, 1, 1)).days
