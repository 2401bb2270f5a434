"""The run form as it arrives from the page: one pydantic model, checked at the wire."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RunForm"]


class RunForm(BaseModel):
    """What a visitor asks to run: an agent on one task of a served dataset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1, max_length=200, description="A Harbor agent name.")
    dataset: str = Field(description="A dataset the playground serves, by its spec.")
    task: str = Field(description="A task of that dataset, by name.")
    engine: Literal["server", "visitor"] = Field(
        "server", description="The server's configured engine, or the visitor's own URL "
        "(certified before use).")
    llm_url: str | None = Field(
        None, max_length=2000, description="The visitor's engine; only with engine=visitor.")
    attempts: int = Field(1, ge=1, le=8, description="Rollouts of the task.")
    budget: int | None = Field(20, ge=1, le=1000, description="Model calls per rollout.")
    temperature: float | None = Field(None, ge=0, le=2, description="Imposed on every call.")
    max_tokens: int | None = Field(None, ge=1, le=1_000_000,
                                   description="Imposed on every call.")
    write_to: str | None = Field(
        None, max_length=64, description="A dataset name to commit the run's rollouts "
        "to, under the server's --datasets-dir; None: results.jsonl only.")
