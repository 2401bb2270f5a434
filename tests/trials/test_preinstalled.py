"""The preinstalled variants of Harbor's adapters (trials/preinstalled.py)."""

from __future__ import annotations

from pathlib import Path

from harbor.models.model_api_format import ModelApiFormat


def test_pi_names_its_key_variable_bare_as_the_pinned_release_reads_it(tmp_path: Path) -> None:
    # pi 0.73 resolves `apiKey` as a variable name, else as the key itself: Harbor's
    # `$OPENAI_API_KEY` would reach the proxy as the literal key (a 401).
    from harbor_ray.trials.preinstalled import PreinstalledPi

    agent = PreinstalledPi(logs_dir=tmp_path, model_name="openai/m",
                           base_url="http://proxy:1/v1",
                           model_api_format=ModelApiFormat.OPENAI_CHAT_COMPLETIONS,
                           extra_env={"OPENAI_API_KEY": "session-key"})
    models = agent._build_custom_models_json(agent.model_connection, "m")
    assert models is not None
    (provider,) = models["providers"].values()
    assert provider["apiKey"] == "OPENAI_API_KEY"
    assert provider["baseUrl"] == "http://proxy:1/v1"
    assert provider["api"] == "openai-completions"
