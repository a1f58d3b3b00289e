"""Resource instances of the code location, configured from the environment (nothing secret is required)."""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from awm_resources.embedder import EmbedderResource
from awm_resources.llm import LLMResource
from awm_resources.ray import RayResource
from awm_resources.store_resource import StoreResource


class SynthesisSettings(dg.ConfigurableResource):
    """Knobs of the synthesis stages (thresholds from the paper)."""

    tasks_per_scenario: int = 10
    schema_threshold: float = Field(default=0.10, description="max share of failing tables")
    sample_threshold: float = Field(default=0.10, description="max share of failing INSERTs")
    candidates_per_batch: int = 8
    dedup_threshold: float = Field(default=0.85, description="reject a scenario at cosine >= this to a kept one")
    max_per_category: int = 50
    env_check_timeout_s: float = 60.0
    verifier_timeout_s: float = 10.0

    def as_dict(self) -> dict:
        return self.model_dump()


def env_or(name: str, default=None):
    """`EnvVar(name)` when the variable is set (shown as such in the UI), else the default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def max_retries() -> int:
    """Self-correction retries per stage (`AWM_MAX_RETRIES`, default 5 as in the paper)."""
    return int(os.environ.get("AWM_MAX_RETRIES", "5"))


def build_resources() -> dict:
    return {
        "llm": LLMResource(model=env_or("AWM_LLM_MODEL", "replay"), api_base=env_or("AWM_LLM_API_BASE"),
                           api_key=env_or("AWM_LLM_API_KEY"), replay_dir=env_or("AWM_REPLAY_DIR"),
                           record_dir=env_or("AWM_RECORD_DIR")),
        # The judge of rollouts is configured apart from the synthesis LLM (code mode needs none).
        "judge_llm": LLMResource(model=env_or("AWM_JUDGE_MODEL", "replay"), api_base=env_or("AWM_JUDGE_API_BASE"),
                                 api_key=env_or("AWM_JUDGE_API_KEY"), temperature=0.0),
        "store": StoreResource(root=env_or("AWM_HOME")),
        "embedder": EmbedderResource(),
        "ray": RayResource(address=env_or("RAY_ADDRESS")),
        "synthesis": SynthesisSettings(),
    }
