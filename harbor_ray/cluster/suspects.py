"""Which node a new rollout host should go to, once hosts have died on some (pure).

A node that is lost at once (a machine gone) stays "alive" to Ray until its health
checks have failed for a while (seconds to a minute), and a host placed on it meanwhile
dies too: its rollouts are `infra_lost` again and use up their retries. So the pool
remembers the node of every host that died, and while any such suspect node is still
listed alive, new hosts go to the least-loaded node that is not suspect. Suspicion ends
when the node is shown alive (work pinned to it ran: the host died alone), when it is
no longer listed, or after `hold_s`; with every node suspect (a single node), any will
do, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


class SuspectNodes:
    """Nodes where a host died, until they are shown alive or `hold_s` passes."""

    def __init__(self, hold_s: float, clock: Callable[[], float]) -> None:
        self._hold_s, self._clock = hold_s, clock
        self._since: dict[str, float] = {}

    def suspect(self, node_id: str) -> None:
        self._since[node_id] = self._clock()

    def cleared(self, node_id: str) -> None:
        """The node ran work after its host died: it is alive."""
        self._since.pop(node_id, None)

    def current(self, alive: Iterable[str]) -> set[str]:
        """The suspects still worth avoiding among `alive` (the others are forgotten:
        a node no longer listed gets no hosts anyway, and a restarted one has a new id)."""
        listed = set(alive)
        now = self._clock()
        self._since = {
            node: since
            for node, since in self._since.items()
            if node in listed and now - since < self._hold_s
        }
        return set(self._since)

    def __bool__(self) -> bool:
        return bool(self._since)


def choose_node(alive: Iterable[str], suspects: set[str], load: Mapping[str, int]) -> str | None:
    """The node for a new host: None (let Ray spread it) when no alive node is suspect,
    or every one is; else the trusted node with the fewest of the pool's hosts (`load`),
    the first listed on a tie."""
    alive = list(alive)
    trusted = [node for node in alive if node not in suspects]
    if len(trusted) in (0, len(alive)):
        return None
    return min(trusted, key=lambda node: load.get(node, 0))
