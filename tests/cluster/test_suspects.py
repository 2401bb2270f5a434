"""Choosing a node for a new host once hosts have died on some (pure)."""

from __future__ import annotations

from harbor_ray.cluster.suspects import SuspectNodes, choose_node

NODES = ["head", "w1", "w2"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_suspects_ray_spreads_the_host() -> None:
    assert choose_node(NODES, set(), {"head": 3}) is None


def test_a_suspect_node_is_avoided_for_the_least_loaded_trusted_one() -> None:
    assert choose_node(NODES, {"w2"}, {"head": 2, "w1": 1, "w2": 0}) == "w1"
    assert choose_node(NODES, {"w2"}, {"w1": 1}) == "head"
    assert choose_node(NODES, {"w2"}, {}) == "head"  # a tie: the first listed


def test_with_every_node_suspect_any_will_do() -> None:
    assert choose_node(["head"], {"head"}, {}) is None
    assert choose_node(NODES, set(NODES), {}) is None


def test_a_suspect_stays_until_shown_alive() -> None:
    clock = Clock()
    suspects = SuspectNodes(hold_s=60, clock=clock)
    assert not suspects
    suspects.suspect("w2")
    clock.now += 59
    assert suspects.current(NODES) == {"w2"}
    suspects.cleared("w2")
    assert suspects.current(NODES) == set() and not suspects


def test_a_suspect_is_trusted_again_after_the_hold() -> None:
    clock = Clock()
    suspects = SuspectNodes(hold_s=60, clock=clock)
    suspects.suspect("w2")
    clock.now += 60
    assert suspects.current(NODES) == set() and not suspects


def test_a_suspect_no_longer_listed_is_forgotten() -> None:
    suspects = SuspectNodes(hold_s=60, clock=Clock())
    suspects.suspect("w2")
    suspects.suspect("w1")
    assert suspects.current(["head", "w1"]) == {"w1"}
    # Listed again (it cannot be, with the same id, in Ray; here: forgotten all the same).
    assert suspects.current(NODES) == {"w1"}


def test_a_host_dying_again_restarts_the_hold() -> None:
    clock = Clock()
    suspects = SuspectNodes(hold_s=60, clock=clock)
    suspects.suspect("w2")
    clock.now += 50
    suspects.suspect("w2")
    clock.now += 50
    assert suspects.current(NODES) == {"w2"}
