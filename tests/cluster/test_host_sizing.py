import pytest

import harbor_ray.cluster.nodes as nodes
from harbor_ray.cluster.host_sizing import HostPlan, NodeCapacity, hosts_fitting, plan_hosts

GIB = 2**30
LAPTOP = NodeCapacity(cpus=16, memory_bytes=20 * GIB)  # 32 by CPU, 68 by memory


def test_a_node_holds_two_hosts_a_cpu_within_half_its_memory() -> None:
    assert hosts_fitting(LAPTOP) == 32
    assert hosts_fitting(NodeCapacity(cpus=64, memory_bytes=3 * GIB)) == 10
    assert hosts_fitting(NodeCapacity(cpus=0, memory_bytes=0)) == 1


def test_what_fits_is_started_as_asked() -> None:
    assert (
        plan_hosts(100, 8, [LAPTOP])
        == plan_hosts(100, 8, [])
        == HostPlan(hosts=13, rollouts_per_host=8)
    )


def test_too_many_hosts_take_more_rollouts_each_and_the_warning_shows_the_sums() -> None:
    plan = plan_hosts(1000, 8, [LAPTOP])
    assert (plan.hosts, plan.rollouts_per_host) == (32, 32)
    assert plan.warning is not None
    for part in (
        "concurrency 1000 at 8 rollouts per host needs 125 host processes",
        "~150 MB each",
        "1 node(s) with 16 CPUs and 20.0 GiB hold 32",
        "running 32 rollouts per host instead",
    ):
        assert part in plan.warning, plan.warning


def test_several_nodes_add_up() -> None:
    plan = plan_hosts(1000, 8, [LAPTOP] * 4)
    assert (plan.hosts, plan.rollouts_per_host, plan.warning) == (125, 8, None)


def test_the_plan_over_the_live_nodes_names_the_setting_that_silences_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nodes, "node_capacities", lambda: [LAPTOP])
    plan = nodes.host_plan(1000, 8, setting="rollouts_per_host:")
    assert plan.warning is not None
    assert plan.warning.endswith(f"(rollouts_per_host: {plan.rollouts_per_host} silences this)")
    assert nodes.host_plan(8, 8, setting="--rollouts-per-host").warning is None
