"""The one configuration object of a GRPO run, with the paper's defaults, loadable from YAML.

Defaults follow AWM (arXiv 2602.10090, training setup): G=16 rollouts per task, 64 tasks per
step, mini-batch 16 tasks, lr 7e-7, KL 0.001, entropy 0, clip-high 0.28, temperature 1.0, 2,048
response tokens per turn, a 32k context, 20 turns, 96 steps, history window w=3. The paper's
"sequence-level importance sampling" corrects the mismatch between the rollout engine (vLLM) and the
trainer: token-level policy ratios (PPO clip per token) times a per-turn engine correction
(`engine_correction*`, TRL's vllm_importance_sampling_correction), plain beta*KL. A YAML file
overrides any of them section by section; unknown keys are errors (a typo must not silently train
with a default).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelConfig(_Section):
    """The policy: a Hugging Face path/id, or the tiny Qwen3 built locally (tests, demos)."""

    path: str | None = Field(default=None, description="model folder or hub id (a GPU run: e.g. Qwen/Qwen3-4B)")
    tiny: bool = Field(default=False, description="build awm_rl.agent.tiny_model's Qwen3 (random init; a local tokenizer fitted to "
                       "the run's tool listings and tasks)")
    tiny_cache_dir: str | None = Field(default=None, description="where the tiny model is cached (default $AWM_HOME/models)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gradient_checkpointing: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> "ModelConfig":
        if bool(self.path) == bool(self.tiny):
            raise ValueError("model: set exactly one of `path` (a model folder or hub id) or `tiny: true`")
        return self


class EnvironmentsConfig(_Section):
    """Which environments and tasks to train on (a filter of the environment catalog)."""

    store_root: str | None = Field(default=None, description="artifact store (default $AWM_HOME)")
    catalog: str | None = Field(default=None, description="catalog JSON (default <store_root>/catalog.json)")
    catalog_version: str | None = Field(
        default=None, description="train on this kept catalog version (its digest, or a unique prefix of 6+ characters; "
        "catalog_versions/<digest>.json in the store) instead of catalog.json; fails, listing them, when any of its "
        "environments changed since")
    scenarios: list[str] | None = Field(default=None, description="only these environments (default: all ready)")
    max_scenarios: int | None = Field(default=None, ge=1)
    if_not_ready: Literal["error", "use_catalog"] = Field(
        default="error", description="when a named environment is not ready in the catalog: fail, or train on the "
        "catalog's ready environments instead (as many as named, or max_scenarios)")
    max_tasks_per_scenario: int | None = Field(default=None, ge=1)
    verifier_audit: Literal["catalog", "run", "stored", "off"] = Field(
        default="catalog", description="leave out tasks whose verifier fails the do-nothing audit: as the catalog "
        "says (auditing environments it has no audit for), audit now, the stored verifier_audit.json, or keep all")
    env_hosts: int | None = Field(default=None, ge=1, description="Ray host actors for environment instances")
    env_host_resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources the environment hosts require, e.g. "
        "{cpu_worker: 0.01} to keep them on CPU nodes that advertise it (GPU nodes do not)")
    call_timeout_s: float = 10.0

    @model_validator(mode="after")
    def _one_catalog(self) -> "EnvironmentsConfig":
        if self.catalog and self.catalog_version:
            raise ValueError("environments: set `catalog` (a file) or `catalog_version` (a kept version), not both")
        return self


class GRPOSettings(_Section):
    """The optimisation (paper defaults)."""

    steps: int = Field(default=96, ge=1, description="RL steps; each runs tasks_per_step x group_size rollouts")
    group_size: int = Field(default=16, ge=2, description="G rollouts per task (group-relative advantages)")
    tasks_per_step: int = Field(default=64, ge=1)
    mini_batch_tasks: int = Field(default=16, ge=1, description="tasks per policy update (tasks_per_step / this updates per step)")
    micro_batch_samples: int = Field(default=8, ge=1, description="per-turn samples per forward/backward pass")
    learning_rate: float = Field(default=7e-7, gt=0)
    beta: float = Field(default=0.001, ge=0, description="KL coefficient against the initial policy")
    entropy_coef: float = 0.0
    epsilon: float = Field(default=0.2, gt=0, description="clip low")
    epsilon_high: float = Field(default=0.28, gt=0, description="clip high")
    importance_sampling_level: Literal["sequence", "token"] = Field(
        default="token", description="policy ratio pi/pi_old per token (PPO/GRPO clip, the paper) or TRL's GSPO "
        "sequence mean (clips the average log-ratio, which leaves clip-high nearly inert)")
    use_bias_correction_kl: bool = Field(
        default=False, description="multiply the KL term by the policy ratio (TRL's DeepSeek-V3.2 option); "
        "False: plain beta*KL as in the paper")
    engine_correction: bool = Field(
        default=True, description="weight each turn's loss by pi_trainer/pi_engine of its tokens (TRL's "
        "vllm_importance_sampling_correction); with transformers generation the engine is the trainer: ratio 1")
    engine_correction_mode: Literal["sequence_mask", "sequence_truncate", "token_mask", "token_truncate"] = Field(
        default="sequence_mask", description="one ratio per turn (sequence_*) or per token; outside "
        "[engine_correction_min, engine_correction_max] it is zeroed (*_mask) or clamped (*_truncate), counted per step")
    engine_correction_min: float | None = Field(default=None, ge=0, description="lower bound (None: none)")
    engine_correction_max: float = Field(default=3.0, gt=0, description="upper bound (TRL's default 3)")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "grpo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = 0
    save_every: int = Field(default=1, ge=1, description="checkpoint every N RL steps")
    save_total_limit: int | None = Field(default=2, description="keep at most this many checkpoints (None: all)")
    seed: int = 42

    @model_validator(mode="after")
    def _divisible(self) -> "GRPOSettings":
        if self.engine_correction_min is not None and self.engine_correction_min >= self.engine_correction_max:
            raise ValueError(f"grpo.engine_correction_min ({self.engine_correction_min}) must be below "
                             f"grpo.engine_correction_max ({self.engine_correction_max})")
        if self.tasks_per_step % self.mini_batch_tasks:
            raise ValueError(f"grpo.tasks_per_step ({self.tasks_per_step}) must be a multiple of grpo.mini_batch_tasks "
                             f"({self.mini_batch_tasks})")
        return self

    @property
    def updates_per_step(self) -> int:
        return self.tasks_per_step // self.mini_batch_tasks


class RolloutConfig(_Section):
    """Episodes: the meta-tool loop, its history window and generation limits."""

    max_turns: int = Field(default=20, ge=1)
    history: Literal["window", "full"] = Field(
        default="window", description="window: a turn sees system + task + first list_tools exchange + the last "
        "`window` exchanges (history-aware); full: the whole conversation")
    window: int = Field(default=3, ge=0)
    max_response_tokens: int = Field(default=2048, ge=1, description="generation limit of one turn")
    max_context_tokens: int = Field(default=32_768, ge=16, description="prompt + response limit of one turn")
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = 1.0
    concurrency: int = Field(default=256, ge=1, description="episodes in flight at once")
    batch_wait_ms: float = Field(default=20.0, ge=0, description="how long a generation batch waits for more turns")
    tool_listing: Literal["full", "compact"] = Field(
        default="full", description="compact: list_tools answers names and schemas without documentation "
        "(tiny CPU models only; the format rules are unchanged)")

    @property
    def effective_window(self) -> int | None:
        return None if self.history == "full" else self.window


class JudgeConfig(_Section):
    """How episodes that end normally are classified (awm_rl.reward.Judge)."""

    mode: Literal["code", "llm", "sql"] = "code"
    llm_model: str | None = Field(default=None, description="litellm model for llm/sql modes (default "
                                  "$AWM_JUDGE_MODEL, else $AWM_LLM_MODEL)")
    llm_api_base: str | None = None
    timeout_s: float = 10.0


class WarmStartConfig(_Section):
    """A short supervised start on scripted, format-valid trajectories, so rewards vary within groups.

    A randomly initialised policy never emits a valid tool call: every reward is -1, every
    advantage 0 and nothing trains. Off for a real instruction-tuned model.
    """

    enabled: bool = False
    steps: int = Field(default=150, ge=1, description="at most this many full-batch steps")
    target_loss: float | None = Field(default=0.003, gt=0, description="stop once the mean token loss is below this")
    learning_rate: float = Field(default=1e-2, gt=0)
    tasks_per_scenario: int = Field(default=3, ge=1)


class CurriculumConfig(_Section):
    """Which tasks a step trains on, from what the policy passes (awm_rl.training.curriculum). Off: the fixed
    shuffled schedule, exactly as without this section."""

    enabled: bool = False
    dynamic_sampling: bool = Field(
        default=True, description="a group whose G rewards are all equal (zero advantages, no gradient) is not "
        "trained on; its slot is refilled with another task's G rollouts")
    max_refill_rounds: int = Field(default=2, ge=0, description="refill rounds per step at most")
    max_refill_groups: int | None = Field(default=None, ge=1, description="refill groups per step at most "
                                          "(default: tasks_per_step)")
    band: tuple[float, float] = Field(default=(0.2, 0.8), description="preferred pass-rate band [low, high]")
    out_of_band_weight: float = Field(default=0.1, ge=0, description="sampling weight of a task outside the band "
                                      "(in the band or never attempted: 1; 0: only when nothing else is left)")
    retire_after: int | None = Field(default=16, ge=1, description="a task this run's policy completed this many "
                                     "times in a row is not chosen again (null: never)")
    prior: Literal["store", "none"] = Field(
        default="store", description="pass rates start from the store's per-task difficulty records (store) or "
        "from nothing (none); every rollout of the run is added as it goes")
    prior_policies: list[str] = Field(default_factory=list, description="with prior store: only these policies' "
                                      "records (empty: every policy's)")

    @model_validator(mode="after")
    def _band(self) -> "CurriculumConfig":
        low, high = self.band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"curriculum.band {list(self.band)} must be [low, high] with 0 <= low <= high <= 1")
        return self


class GenerationConfig(_Section):
    """Where turns are generated: transformers (CPU or GPU) or vLLM (GPU, colocated or a server)."""

    backend: Literal["auto", "transformers", "vllm"] = Field(
        default="auto", description="auto: vLLM when it is installed and a GPU is visible, else transformers")
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = 0.35
    vllm_server_base_url: str | None = None
    vllm_max_model_length: int | None = None


class RayConfig(_Section):
    """Where the job runs: the cluster at `address` / $RAY_ADDRESS, else a local one."""

    address: str | None = None
    trainer_num_gpus: float = Field(default=0, ge=0, description="GPUs of the trainer actor (0 on CPU machines)")
    trainer_num_cpus: float = Field(default=1, ge=0)
    torch_threads: int | None = Field(default=None, description="torch CPU threads in the trainer (default: "
                                      "AWM_TORCH_THREADS, else all cores)")
    in_process: bool = Field(default=False, description="run the trainer in the calling process instead of an actor")
    trainer_workers: int = Field(default=1, ge=1, description="data-parallel trainer processes (Ray Train "
                                 "TorchTrainer workers, each with trainer_num_gpus GPUs); 1: a single trainer actor")
    strategy: Literal["ddp", "fsdp", "zero3"] = Field(
        default="ddp", description="how trainer workers share the model: ddp (a full replica each), fsdp (FSDP "
        "full shard) or zero3 (DeepSpeed ZeRO-3: parameters, gradients and Adam states sharded)")
    backend: Literal["auto", "gloo", "nccl"] = Field(default="auto", description="torch.distributed backend "
                                                     "(auto: nccl with GPUs, gloo on CPU)")
    startup_timeout_s: float = Field(default=300, gt=0, description="how long the trainer actor may wait for resources")


class TrainConfig(_Section):
    """Everything a run needs; `load_config` reads it from YAML."""

    name: str = "grpo"
    output_dir: str | None = Field(default=None, description="default $AWM_HOME/training/<name>")
    model: ModelConfig
    environments: EnvironmentsConfig = Field(default_factory=EnvironmentsConfig)
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    log_samples: bool = Field(default=False, description="write every step's conversations and per-turn samples "
                              "(decoded) under steps/ (large at scale; the tiny config turns it on)")
    tensorboard: bool = Field(default=True, description="TensorBoard event files under <output_dir>/tensorboard: "
                              "TRL's own logs (report_to) and every step's rollout metrics")

    @model_validator(mode="after")
    def _workers(self) -> "TrainConfig":
        workers, g = self.ray.trainer_workers, self.grpo
        if workers > 1 and (g.mini_batch_tasks * g.group_size) % workers:
            raise ValueError(f"ray.trainer_workers ({workers}) must divide grpo.mini_batch_tasks x group_size "
                             f"({g.mini_batch_tasks * g.group_size} rollouts per update)")
        if self.ray.strategy != "ddp" and not (self.generation.backend == "vllm" and self.generation.vllm_mode == "server"):
            raise ValueError(f"ray.strategy {self.ray.strategy} shards the weights, so generating with them needs a "
                             "collective on every turn batch: use generation.backend vllm with vllm_mode server")
        if workers > 1 and self.curriculum.enabled:
            raise ValueError("curriculum needs one trainer process (its refill rounds run between the processes' "
                             "collectives): set ray.trainer_workers: 1 or curriculum.enabled: false")
        if workers > 1 and self.ray.in_process:
            raise ValueError("ray.in_process runs one trainer; set ray.trainer_workers: 1 or drop in_process")
        return self

    @model_validator(mode="after")
    def _context(self) -> "TrainConfig":
        if self.rollout.max_response_tokens >= self.rollout.max_context_tokens:
            raise ValueError(f"rollout.max_response_tokens ({self.rollout.max_response_tokens}) must be below "
                             f"rollout.max_context_tokens ({self.rollout.max_context_tokens})")
        return self

    # -- resolved paths ------------------------------------------------------------------------
    def store_root(self) -> Path:
        from awm_resources.store import default_home

        return Path(self.environments.store_root).resolve() if self.environments.store_root else default_home()

    def resolved_output_dir(self) -> Path:
        if self.output_dir:
            return Path(self.output_dir).resolve()
        return self.store_root() / "training" / self.name

    def resolved(self) -> "TrainConfig":
        """A copy with store root and output folder made absolute (what travels to the trainer actor)."""
        data = self.model_dump()
        data["environments"]["store_root"] = str(self.store_root())
        data["output_dir"] = str(self.resolved_output_dir())
        if self.model.tiny and not self.model.tiny_cache_dir:
            data["model"]["tiny_cache_dir"] = str(self.store_root() / "models")
        return TrainConfig.model_validate(data)


class ConfigError(ValueError):
    """A config file that cannot be read or does not validate; the message names the file and field."""


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _format_errors(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: invalid training config:"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any], *, source: str = "<config>",
                     overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Validate a config mapping (plus nested `overrides`), with errors naming `source` and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a training config must be a mapping, got {type(data).__name__}")
    try:
        return TrainConfig.model_validate(_merge(data, overrides or {}))
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def load_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML config; `overrides` is merged on top (nested dicts merge, other values replace)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"training config {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return config_from_dict(data, source=str(path), overrides=overrides)
