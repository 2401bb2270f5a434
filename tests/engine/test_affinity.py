"""The sticky map of sessions to engine replicas (harbor_ray.engine.affinity), pure:
tests/engine/test_routing.py runs it as Serve's request router."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from harbor_ray.engine.affinity import AffinityLimits, SessionAffinity

IDLE = {"a": 0, "b": 0, "c": 0}


def test_a_first_call_goes_to_the_least_loaded_replica() -> None:
    affinity = SessionAffinity()
    assert affinity.choose("s1", {"a": 3, "b": 1, "c": 2}, now=0.0) == ["b", "c", "a"]
    assert affinity.replica_of("s1") == "b"
    assert affinity.held("b") == 1


def test_later_calls_stay_on_the_replica_of_the_last_call_whatever_the_loads() -> None:
    affinity = SessionAffinity()
    affinity.choose("s1", {"a": 0, "b": 5}, now=0.0)
    for step in range(1, 20):
        loads = {"a": 100 + step, "b": step % 3}
        assert affinity.choose("s1", loads, now=float(step))[0] == "a"
    assert affinity.held("a") == 1 and affinity.held("b") == 0


def test_the_rest_follow_least_loaded_first_as_fallbacks() -> None:
    affinity = SessionAffinity()
    affinity.served("s1", "c", now=0.0)
    assert affinity.choose("s1", {"a": 4, "b": 1, "c": 9}, now=1.0) == ["c", "b", "a"]


def test_equal_loads_spread_new_sessions_by_sessions_held_then_name() -> None:
    # A burst of first calls sees the same in-flight counts: the sessions each replica
    # already holds decide, so the burst spreads evenly instead of piling on one.
    affinity = SessionAffinity()
    firsts = [affinity.choose(f"s{i}", IDLE, now=0.0)[0] for i in range(9)]
    assert firsts == ["a", "b", "c"] * 3
    assert [affinity.held(r) for r in "abc"] == [3, 3, 3]


def test_a_call_served_elsewhere_moves_the_session_there() -> None:
    affinity = SessionAffinity()
    affinity.choose("s1", {"a": 0, "b": 1}, now=0.0)
    affinity.served("s1", "b", now=1.0)  # "a" refused it as full
    assert affinity.replica_of("s1") == "b"
    assert (affinity.held("a"), affinity.held("b")) == (0, 1)
    assert affinity.choose("s1", {"a": 0, "b": 7}, now=2.0)[0] == "b"


def test_a_dead_replica_hands_its_sessions_to_the_least_loaded_others() -> None:
    affinity = SessionAffinity()
    for i in range(6):
        affinity.choose(f"s{i}", IDLE, now=0.0)
    on_a = [s for s in (f"s{i}" for i in range(6)) if affinity.replica_of(s) == "a"]
    assert len(on_a) == 2
    assert affinity.live(["b", "c"]) == 2
    assert affinity.held("a") == 0
    for session in on_a:
        assert affinity.replica_of(session) is None
    moved = [affinity.choose(s, {"b": 0, "c": 0}, now=1.0)[0] for s in on_a]
    assert sorted(moved) == ["b", "c"]  # spread, not piled on one
    # The others never moved.
    for i in range(6):
        assert affinity.replica_of(f"s{i}") in {"b", "c"}


def test_a_replica_missing_from_the_loads_is_not_chosen_even_before_live_is_called() -> None:
    # The loads are the live replicas as the caller sees them at this call; a session
    # whose replica is not among them moves, whatever `live` was told before.
    affinity = SessionAffinity()
    affinity.served("s1", "a", now=0.0)
    assert affinity.choose("s1", {"b": 2, "c": 1}, now=1.0) == ["c", "b"]
    assert affinity.replica_of("s1") == "c"
    assert affinity.held("a") == 0


def test_a_replica_that_returns_gets_new_sessions_not_its_old_ones_back() -> None:
    affinity = SessionAffinity()
    affinity.choose("s1", {"a": 0, "b": 1}, now=0.0)
    affinity.live(["b"])
    assert affinity.choose("s1", {"b": 0}, now=1.0) == ["b"]
    # "a" is back (a replacement): s1 stays where its prefix now is.
    assert affinity.choose("s1", {"a": 0, "b": 9}, now=2.0)[0] == "b"
    assert affinity.choose("s2", {"a": 0, "b": 9}, now=2.0)[0] == "a"


def test_no_live_replica_means_no_choice_and_nothing_placed() -> None:
    affinity = SessionAffinity()
    assert affinity.choose("s1", {}, now=0.0) == []
    assert len(affinity) == 0 and affinity.replica_of("s1") is None


def test_idle_sessions_are_forgotten_at_the_next_call_and_their_holds_freed() -> None:
    affinity = SessionAffinity(AffinityLimits(idle_s=10.0))
    affinity.choose("old", {"a": 0, "b": 1}, now=0.0)
    affinity.choose("kept", {"a": 5, "b": 0}, now=5.0)
    affinity.choose("kept", {"a": 5, "b": 0}, now=12.0)
    assert affinity.replica_of("old") is None  # seen at 0, idle for 12 >= 10
    assert affinity.replica_of("kept") == "b"
    assert affinity.held("a") == 0 and len(affinity) == 1
    assert affinity.forget_idle(21.9) == 0
    assert affinity.forget_idle(22.0) == 1
    assert len(affinity) == 0 and affinity.held("b") == 0


def test_a_session_seen_again_is_renewed_not_forgotten_with_its_first_sighting() -> None:
    affinity = SessionAffinity(AffinityLimits(idle_s=10.0))
    affinity.choose("s1", IDLE, now=0.0)
    affinity.choose("s2", IDLE, now=1.0)
    affinity.served("s1", "a", now=9.0)
    assert affinity.forget_idle(10.5) == 0
    assert affinity.forget_idle(11.0) == 1  # s2
    assert affinity.replica_of("s1") == "a"


def test_past_max_sessions_the_least_recently_seen_go_first() -> None:
    affinity = SessionAffinity(AffinityLimits(max_sessions=3))
    for i, session in enumerate(["s0", "s1", "s2"]):
        affinity.choose(session, IDLE, now=float(i))
    affinity.served("s0", "a", now=3.0)  # s0 seen again: s1 is now the oldest
    affinity.choose("s3", IDLE, now=4.0)
    assert len(affinity) == 3
    assert affinity.replica_of("s1") is None
    assert {s for s in ("s0", "s2", "s3") if affinity.replica_of(s)} == {"s0", "s2", "s3"}
    assert sum(affinity.held(r) for r in "abc") == 3


def test_a_clock_stepping_back_does_not_hide_an_old_session_from_forgetting() -> None:
    affinity = SessionAffinity(AffinityLimits(idle_s=10.0))
    affinity.choose("s1", IDLE, now=100.0)
    affinity.choose("s2", IDLE, now=50.0)  # an earlier time than s1's
    assert affinity.forget_idle(109.0) == 0
    assert affinity.forget_idle(110.0) == 2


@pytest.mark.parametrize(
    "limits", [{"idle_s": 0.0}, {"idle_s": -1.0}, {"max_sessions": 0}, {"idle_s": float("nan")}]
)
def test_limits_are_checked(limits: dict[str, float]) -> None:
    with pytest.raises(AssertionError):
        AffinityLimits(**limits)  # type: ignore[arg-type]


def test_random_traffic_keeps_the_counts_true_and_the_memory_bounded() -> None:
    rng = random.Random(7)
    affinity = SessionAffinity(AffinityLimits(idle_s=30.0, max_sessions=50))
    replicas = ["r0", "r1", "r2", "r3"]
    live = list(replicas)
    now = 0.0
    for _ in range(5000):
        now += rng.random()
        action = rng.random()
        if action < 0.02 and len(live) > 1:
            live.remove(rng.choice(live))
            affinity.live(live)
        elif action < 0.04 and len(live) < len(replicas):
            live.append(rng.choice([r for r in replicas if r not in live]))
        session = f"s{rng.randrange(120)}"
        loads = {r: rng.randrange(4) for r in live}
        affinity.forget_idle(now)  # as choose does first
        before = affinity.replica_of(session)
        ranked = affinity.choose(session, loads, now)
        assert sorted(ranked) == sorted(live)
        if before in live:
            assert ranked[0] == before
        if rng.random() < 0.1:
            affinity.served(session, rng.choice(live), now)
        assert len(affinity) <= 50
        placed = [affinity.replica_of(f"s{i}") for i in range(120)]
        for replica in replicas:
            assert affinity.held(replica) == placed.count(replica)


def test_the_core_imports_no_ray() -> None:
    program = (
        "import sys, harbor_ray.engine.affinity; "
        "print(sorted(m for m in ('ray', 'vllm', 'starlette') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
