"""Test-wide settings. Harbor and LiteLLM must not try the network from tests."""

import os

os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Ray would start workers through `uv run` in a copy of the working dir when the tests
# themselves run under `uv run` (see harbor_ray.cli.main).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

# The real engine (one per test session) and its Ray cluster.
pytest_plugins = ["tests.fixtures.engine"]
