"""The Dagster resources of the code location: thin faces of the Dagster-free clients in
`awm_resources`, configured from the environment through `EnvVar` (nothing secret is required)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from awm_assets.synthesis.config import SynthesisConfig
from awm_resources.llm import REPLAY_MODEL, LLMClient
from awm_resources.settings import (
    LLMFields,
    Settings,
    StageLLMFields,
    configured,
    judge_llm_config,
    load_settings,
)
from awm_resources.store import ArtifactStore, default_home


class StageLLMConfig(dg.Config, StageLLMFields):
    """Overrides for one stage (unset fields inherit the resource's): e.g. a cheap model for `classify`,
    a strong one with a large output limit for `env_code`. The fields are the settings' (`StageLLMFields`)."""


class LLMResource(dg.ConfigurableResource, LLMFields):
    """The synthesis LLM. `model` is a litellm model string; empty or `replay` answers from recordings.
    Parameters are adapted per model from litellm's model information (see `awm_resources.llm`). The client's
    fields (model, api_base, ..., timeout_s) are the settings' (`LLMFields`): declared once, with their
    descriptions; pass secrets as `EnvVar`."""

    stages: dict[str, StageLLMConfig] = Field(default_factory=dict, description="per-stage overrides, keyed by stage name (classify, env_code, ...)")
    transport_retries: int = 4
    max_retry_after_s: float = Field(default=120.0, description="longest wait a 429's Retry-After can impose")
    cache: bool = Field(default=True, description="persistent response cache under $AWM_HOME")
    replay_dir: str | None = Field(default=None, description="folder of recorded answers (default: seeds/recordings)")
    record_dir: str | None = Field(default=None, description="write every real answer here in replay layout")

    _client: LLMClient | None = PrivateAttr(default=None)

    def get_client(self) -> LLMClient:
        if self._client is None:
            self._client = LLMClient(
                self.model or REPLAY_MODEL, api_base=self.api_base or None, api_key=self.api_key or None,
                temperature=self.temperature, max_tokens=self.max_tokens or None, timeout_s=self.timeout_s,
                reasoning_effort=self.reasoning_effort or None, stages=dict(self.stages),
                transport_retries=self.transport_retries, max_retry_after_s=self.max_retry_after_s,
                cache_path=default_home() / "llm_cache.sqlite" if self.cache else None,
                replay_dir=Path(self.replay_dir) if self.replay_dir else None,
                record_dir=Path(self.record_dir) if self.record_dir else None)
        return self._client


class StoreResource(dg.ConfigurableResource):
    """The artifact store."""

    root: str | None = Field(default=None, description="artifact store root; default $AWM_HOME or <project>/.awm_home")

    def get_store(self) -> ArtifactStore:
        return ArtifactStore(self.root or None)


class EmbedderResource(dg.ConfigurableResource):
    """Sentence embeddings for scenario dedup: the bundled MiniLM offline, or an API model through litellm."""

    model: str | None = Field(default=None, description="litellm embedding model, e.g. openai/text-embedding-3-large "
                              "(as the paper); empty: the local sentence-transformers model")
    api_base: str | None = Field(default=None, description="API base of the embedding model")
    api_key: str | None = Field(default=None, description="API key of the embedding model; pass as EnvVar")
    dedup_threshold: float | None = Field(default=None, description="cosine at which a scenario is a duplicate with "
                                          "this model (default: the synthesis setting, 0.85)")
    model_path: str | None = Field(default=None, description="sentence-transformers folder; default: the bundled MiniLM")
    device: str = "cpu"
    cache: str | None = Field(default=None, description="SQLite file of computed embeddings, by model and text; "
                              "default $AWM_HOME/embedding_cache.sqlite")

    _embedder: Any = PrivateAttr(default=None)  # CachedEmbedder, imported on first use (numpy)

    def get_embedder(self) -> Any:
        if self._embedder is None:
            from awm_resources.embedder import ApiEmbedder, CachedEmbedder, Embedder

            inner = (ApiEmbedder(self.model, api_base=self.api_base or None, api_key=self.api_key or None)
                     if self.model else Embedder(Path(self.model_path) if self.model_path else None, self.device))
            self._embedder = CachedEmbedder(inner, Path(self.cache) if self.cache
                                            else default_home() / "embedding_cache.sqlite")
        return self._embedder


class RayResource(dg.ConfigurableResource):
    """The Ray cluster: `RAY_ADDRESS` (or `address`), else a local Ray started on first use."""

    address: str | None = Field(default=None, description="Ray address (ray://... or host:port); default $RAY_ADDRESS, else local")
    num_cpus: int | None = Field(default=None, description="CPUs for a local Ray (default: all)")

    def connect(self) -> dict:
        """Idempotent: returns cluster info (address, resources)."""
        from awm_resources.ray_cluster import init_ray

        return init_ray(self.address or None, num_cpus=self.num_cpus)


class SynthesisSettings(dg.ConfigurableResource, SynthesisConfig):
    """Knobs of the synthesis stages (thresholds from the paper): the fields, defaults and descriptions of
    `SynthesisConfig`, which the Dagster-free stage logic takes (`config()`)."""

    def config(self) -> SynthesisConfig:
        return SynthesisConfig.model_validate(self.model_dump(include=set(SynthesisConfig.model_fields)))


def env_or(name: str, default=None):
    """`EnvVar(name)` when the variable is set (shown as such in the UI), else the default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def as_config(fields: dict[str, tuple[Any, str]]) -> dict[str, Any]:
    """Settings a variable set (awm_resources.settings.configured) as resource config: text and integers as the
    `EnvVar` they came from, so the UI shows the variable; other values (numbers) as read."""
    return {name: dg.EnvVar(env) if isinstance(value, (str, Path)) else
            dg.EnvVar.int(env) if type(value) is int else value for name, (value, env) in fields.items()}


def max_retries() -> int:
    """Self-correction retries per stage (`AWM_MAX_RETRIES`, default 5 as in the paper)."""
    return load_settings().pipeline.max_retries


def sensor_interval_s() -> int:
    """How often the seed and scenario sensors look (`AWM_SENSOR_INTERVAL_S`, default 30 s); the watchdog
    and the catalog automation look twice as often."""
    return load_settings().pipeline.sensor_interval_s


def llm_resource(settings: Settings) -> LLMResource:
    """The synthesis LLM from its settings, per-stage overrides included."""
    llm, paths = settings.llm, configured(settings.paths, "paths")
    stages = {stage: StageLLMConfig(**as_config(configured(s, "llm", "stages", stage)))
              for stage, s in llm.stages.items()}
    return LLMResource(**as_config(configured(llm, "llm")), stages=stages,
                       **as_config({k: v for k, v in paths.items() if k in ("replay_dir", "record_dir")}))


def judge_resource(settings: Settings) -> LLMResource:
    """The judge (judge_llm_config: the one definition), each value as the variable it came from."""
    cfg = judge_llm_config(settings)
    values = {"model": cfg.model or REPLAY_MODEL, "api_base": cfg.api_base, "api_key": cfg.api_key,
              "replay_dir": str(cfg.replay_dir) if cfg.replay_dir else None}
    return LLMResource(**{k: dg.EnvVar(cfg.env[k]) if k in cfg.env else v for k, v in values.items()},
                       temperature=cfg.temperature)


def build_resources() -> dict:
    settings = load_settings()
    home = configured(settings.paths, "paths").get("home")
    return {
        "llm": llm_resource(settings),
        # The judge of rollouts is configured apart from the synthesis LLM (code mode needs none).
        "judge_llm": judge_resource(settings),
        "store": StoreResource(**as_config({"root": home} if home else {})),
        "embedder": EmbedderResource(**as_config({k: v for k, v in configured(settings.embedding, "embedding").items()
                                                  if k != "path"})),
        "ray": RayResource(address=env_or("RAY_ADDRESS")),
        "synthesis": SynthesisSettings(),
    }
