"""Test-wide settings: the entry-point switches (Harbor and LiteLLM must not try the
network, Ray workers must not run through `uv run`), and the shared engine fixtures."""

from harbor_ray.switches import set_switches

set_switches()

# The real engine (one per test session) and its Ray cluster; the task images; the
# multi-node cluster; each suite's time limit per test and wall time; no skip undeclared.
pytest_plugins = [
    "tests.fixtures.agents",
    "tests.fixtures.engine",
    "tests.fixtures.images",
    "tests.fixtures.multinode",
    "tests.fixtures.suite_times",
    "tests.fixtures.skips",
]
