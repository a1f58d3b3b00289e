"""The knobs of the synthesis stages, each once with its default and what it does (thresholds from the paper).

Dagster-free: the stage logic reads attributes of a `SynthesisConfig`; the Dagster resource
(`awm_assets.defs.shared.resources.SynthesisSettings`) inherits these fields, so the UI shows the same defaults
and descriptions. Unknown keys are errors naming them (a misspelled knob is never silently its default).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SynthesisConfig(BaseModel):
    """The synthesis knobs; `SynthesisConfig(**values)` validates a plain mapping (run config, JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks_per_scenario: int = Field(default=10, description="tasks the tasks stage asks for per scenario")
    schema_threshold: float = Field(default=0.10, description="max share of failing tables")
    sample_threshold: float = Field(default=0.10, description="max share of failing INSERTs")
    candidates_per_batch: int = Field(default=8, description="candidates asked for per generation round")
    target_scenarios: int | None = Field(default=None, description="generate rounds until this many scenarios of "
                                         "the batch are accepted (the paper's loop); empty: one round")
    max_generation_rounds: int = Field(default=10, description="rounds at most when target_scenarios is set")
    dedup_threshold: float = Field(default=0.85, description="reject a scenario at cosine >= this to a kept one or "
                                   "a seed")
    max_per_category: int = Field(default=50, description="accepted scenarios at most per category of the fixed list")
    env_check_timeout_s: float = Field(default=60.0, description="seconds the env-code check may take per server")
    verifier_timeout_s: float = Field(default=10.0, description="seconds per verifier run")
