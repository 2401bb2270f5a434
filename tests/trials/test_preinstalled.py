"""The preinstalled variants of Harbor's adapters (trials/preinstalled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor.environments.base import ExecResult
from harbor.models.model_api_format import ModelApiFormat

from harbor_ray.trials.agents import ProxyEndpoint, agent_config
from tests.trials.test_agents import Recorded, RecordingEnvironment


def test_pi_names_its_key_variable_bare_as_the_pinned_release_reads_it(tmp_path: Path) -> None:
    # pi 0.73 resolves `apiKey` as a variable name, else as the key itself: Harbor's
    # `$OPENAI_API_KEY` would reach the proxy as the literal key (a 401).
    from harbor_ray.trials.preinstalled import PreinstalledPi

    agent = PreinstalledPi(
        logs_dir=tmp_path,
        model_name="openai/m",
        base_url="http://proxy:1/v1",
        model_api_format=ModelApiFormat.OPENAI_CHAT_COMPLETIONS,
        extra_env={"OPENAI_API_KEY": "session-key"},
    )
    models = agent._build_custom_models_json(agent.model_connection, "m")
    assert models is not None
    (provider,) = models["providers"].values()
    assert provider["apiKey"] == "OPENAI_API_KEY"
    assert provider["baseUrl"] == "http://proxy:1/v1"
    assert provider["api"] == "openai-completions"


class _NoVenv(RecordingEnvironment):
    """A sandbox without the pinned strands venv: the presence check fails."""

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        result = await super().exec(command, cwd, env, timeout_sec, user)
        if command.startswith("command -v"):
            return ExecResult(stdout="", stderr="", return_code=1)
        return result


@pytest.mark.parametrize("venv_present", [True, False])
async def test_strands_with_its_venv_present_gets_only_the_runner_and_the_factory(
    tmp_path: Path, venv_present: bool
) -> None:
    from harbor_ray.trials.preinstalled import PreinstalledStrands

    config = agent_config(
        "strands",
        proxy=ProxyEndpoint("http://h:1", "http://s:1"),
        session_key="k",
        served_model="m",
    )
    agent = PreinstalledStrands(
        logs_dir=tmp_path / "logs",
        model_name=config.model_name,
        base_url=config.base_url,
        extra_env=config.env,
        **config.kwargs,
    )
    (tmp_path / "logs").mkdir()
    recorded = Recorded()
    environment = (RecordingEnvironment if venv_present else _NoVenv)(tmp_path, recorded)
    await agent.install(environment)
    assert "/installed-agent/strands/strands_runner.py" in recorded.uploads
    # harbor_ray's sample factory, where the runner's PYTHONPATH finds `agent`.
    assert "def create_agent(" in recorded.uploads["/installed-agent/strands/factory/agent.py"]
    fetched = [command for command, _ in recorded.execs if "astral.sh" in command]
    assert bool(fetched) is not venv_present
