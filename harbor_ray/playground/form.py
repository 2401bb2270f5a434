"""The run form as it arrives from the page: one pydantic model, checked at the wire."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harbor_ray.playground.scrub import hide_credentials

__all__ = ["RunForm"]


class RunForm(BaseModel):
    """What a visitor asks to run: an agent on one task of a served dataset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1, max_length=200, description="A Harbor agent name.")
    dataset: str = Field(description="A dataset the playground serves, by its spec.")
    task: str = Field(description="A task of that dataset, by name.")
    engine: Literal["server", "visitor"] = Field(
        "server",
        description="The server's configured engine, or the visitor's own URL "
        "(certified before use).",
    )
    llm_url: str | None = Field(
        None, max_length=2000, description="The visitor's engine; only with engine=visitor."
    )
    attempts: int = Field(1, ge=1, le=8, description="Rollouts of the task.")
    budget: int | None = Field(20, ge=1, le=1000, description="Model calls per rollout.")
    temperature: float | None = Field(None, ge=0, le=2, description="Imposed on every call.")
    max_tokens: int | None = Field(None, ge=1, le=1_000_000, description="Imposed on every call.")
    write_to: str | None = Field(
        None,
        max_length=64,
        description="A dataset name to commit the run's rollouts "
        "to, under the server's --datasets-dir; None: results.jsonl only.",
    )

    def settings(self, model: str | None) -> dict[str, Any]:
        """What the run is set to, as it is stored with it and shown: `model` the served
        model (None until known); the engine the server's, or the visitor's URL with its
        credentials hidden (the answer's scrub hides them again, and the server's URL)."""
        engine = (
            "the server's"
            if self.engine == "server" or not self.llm_url
            else hide_credentials(self.llm_url.encode()).decode()
        )
        return {
            "model": model,
            "engine": engine,
            "agent": self.agent,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "budget": self.budget,
            "attempts": self.attempts,
        }
