"""Which agents CI runs at qualification level 2 today: a rotating subset.

Level 2 for all ten first agents took about 250 s of CI's hour (level 1 for all ten
about 60 s), so CI runs level 1 for every agent and level 2 for `LEVEL_2_SIZE` of them, a
window over the agents in their fixed order (`QUALIFIED`: the pinned CLIs, openhands,
openhands-sdk and vibe among them, then terminus-2) that moves by `LEVEL_2_SIZE` each UTC
day: with twenty-one agents (all but any in LEVEL_2_BLOCKED) every one is run at level 2
at least once in any six days,
and a rerun on the same day runs the same agents. The test's id names them, so CI's log
shows which ran.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from harbor_ray.qualify.harnesses import LEVEL_2_BLOCKED, QUALIFIED

LEVEL_2_SIZE = 4
# The agents the rotation runs at level 2, in their fixed order.
AT_LEVEL_2 = tuple(agent for agent in QUALIFIED if agent not in LEVEL_2_BLOCKED)


def rotating_subset(agents: Sequence[str], day: int, size: int = LEVEL_2_SIZE
                    ) -> tuple[str, ...]:
    """`size` of `agents` (all when there are no more), the window for `day` (days since
    the epoch), in the agents' order."""
    if size >= len(agents):
        return tuple(agents)
    start = day * size % len(agents)
    chosen = {agents[(start + i) % len(agents)] for i in range(size)}
    return tuple(agent for agent in agents if agent in chosen)


def today() -> int:
    """Days since the epoch, UTC: the rotation's clock."""
    return (datetime.datetime.now(datetime.UTC).date() - datetime.date(1970, 1, 1)).days
