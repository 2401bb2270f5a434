"""Which replicas a host's relay uses: its node's first, else other nodes' reachable ones."""

from harbor_ray.cluster.replica_registry import ReplicaEntry, reachable


def _entry(name: str, url: str, node: str) -> ReplicaEntry:
    return ReplicaEntry(name, url, f"i-{name}", node)


def test_a_relay_uses_its_own_nodes_replicas_first() -> None:
    here = _entry("a", "http://10.0.0.2:4000", "n1")
    there = _entry("b", "http://10.0.0.3:4000", "n2")
    assert reachable([here, there], "n1") == [here]


def test_a_node_without_replicas_uses_other_nodes_reachable_ones() -> None:
    loopback = _entry("a", "http://127.0.0.1:4000", "n1")  # only its own node reaches it
    on_node = _entry("b", "http://10.0.0.3:4000", "n2")
    named = _entry("c", "http://localhost:4001", "n2")
    assert reachable([loopback, on_node, named], "n3") == [on_node]
    assert reachable([loopback], "n3") == []
