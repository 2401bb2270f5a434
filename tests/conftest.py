"""Test-wide settings. Harbor and LiteLLM must not try the network from tests."""

import os

os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The real engine (one per test session) and its Ray cluster.
pytest_plugins = ["tests.fixtures.engine"]
