"""One GRPO training job, start to end, in the calling process (the Ray launcher runs it in an actor).

Reads the catalog, selects and schedules tasks, starts the environment pool (host actors on the
Ray cluster), builds or loads the policy (optionally warm-started), trains with `AWMGRPOTrainer`,
and writes into the output folder: `config.json`, `metrics.jsonl` (one line per step),
`steps/step_NNNN/{episodes,samples}.jsonl`, `checkpoint-N/` (TRL checkpoints, every
`save_every` steps), `final/` (model + tokenizer), `curves.png` and `summary.json`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awm_resources.provenance import CatalogVersionError, catalog_version_path, run_provenance, verify_catalog_version
from awm_resources.settings import load_settings
from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.training.config import TrainConfig
from awm_rl.training.metrics import (
    CURVES_FILE,
    METRICS_FILE,
    TENSORBOARD_DIR,
    TRAIN_KEYS,
    MetricsWriter,
    aggregate,
    format_time_split,
    plot_curves,
    time_summary,
)

EventSink = Callable[[dict[str, Any]], None]
SUMMARY_FILE = "summary.json"


class TrainingError(RuntimeError):
    """The job could not run (bad catalog, model, environments); the message says what and where."""


def _emit(on_event: EventSink | None, message: str, **data: Any) -> None:
    if on_event is not None:
        on_event({"kind": "info", "message": message, **data})


def dist_rank() -> tuple[int, int]:
    """(rank, world size) of this trainer process; (0, 1) outside a data-parallel group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def from_rank0(value: Any) -> Any:
    """Rank 0's `value` on every rank (waiting for rank 0, as a barrier does); `value` itself without workers."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return value


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def use_vllm(config: TrainConfig) -> bool:
    """vLLM when asked for (it must then be installed and a GPU visible) or, on `auto`, when both hold."""
    backend = config.generation.backend
    if backend == "transformers":
        return False
    ok = cuda_available() and vllm_available()
    if backend == "vllm" and not ok:
        raise TrainingError("generation.backend is 'vllm' but " + ("no GPU is visible" if not cuda_available()
                            else "the vllm package is not installed (pip install '.[gpu]')"))
    return ok


def build_judge(config: TrainConfig) -> Any:
    from awm_rl.reward import Judge

    if config.judge.mode == "code":
        return Judge("code", timeout_s=config.judge.timeout_s)
    from awm_resources.llm import judge_client
    from awm_resources.settings import judge_llm_config

    llm = judge_llm_config(model=config.judge.llm_model, api_base=config.judge.llm_api_base, fallback_to_synthesis=True)
    if not llm.model:
        raise TrainingError(f"judge.mode is {config.judge.mode!r}: set judge.llm_model (or $AWM_JUDGE_MODEL, "
                            "or $AWM_LLM_MODEL)")
    return Judge(config.judge.mode, llm=judge_client(llm), timeout_s=config.judge.timeout_s)


def grpo_args(config: TrainConfig, out_dir: Path, *, vllm: bool) -> Any:
    """TRL's GRPOConfig for this run. One RL step = one generation round of tasks_per_step x G
    rollouts, split into tasks_per_step / mini_batch_tasks policy updates."""
    from trl import GRPOConfig

    g, r = config.grpo, config.rollout
    cuda = cuda_available()
    updates = g.updates_per_step
    # Master weights in float32 unless the config names a dtype; on a GPU, bf16 autocast.
    load_dtype = "float32" if config.model.dtype == "auto" else config.model.dtype
    # The engine correction's settings travel in TRL's own fields; AWMGRPOTrainer applies them for every backend.
    kwargs: dict[str, Any] = {"vllm_importance_sampling_correction": g.engine_correction,
                              "vllm_importance_sampling_mode": g.engine_correction_mode,
                              "vllm_importance_sampling_clip_min": g.engine_correction_min,
                              "vllm_importance_sampling_clip_max": g.engine_correction_max}
    if vllm:
        kwargs.update(vllm_mode=config.generation.vllm_mode,
                      vllm_gpu_memory_utilization=config.generation.vllm_gpu_memory_utilization,
                      vllm_max_model_length=config.generation.vllm_max_model_length or r.max_context_tokens)
        if config.generation.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = config.generation.vllm_server_base_url
    kwargs.update(strategy_args(config, cuda))
    return GRPOConfig(
        output_dir=str(out_dir), use_cpu=not cuda, bf16=cuda and config.model.dtype in ("auto", "bfloat16"),
        model_init_kwargs={"dtype": load_dtype},
        learning_rate=g.learning_rate, beta=g.beta, entropy_coef=g.entropy_coef, epsilon=g.epsilon,
        epsilon_high=g.epsilon_high, importance_sampling_level=g.importance_sampling_level, loss_type=g.loss_type,
        use_bias_correction_kl=g.use_bias_correction_kl,
        scale_rewards=g.scale_rewards, num_iterations=1, num_generations=g.group_size,
        per_device_train_batch_size=g.mini_batch_tasks * g.group_size // config.ray.trainer_workers,
        gradient_accumulation_steps=1,
        steps_per_generation=updates, max_steps=g.steps * updates, max_completion_length=r.max_response_tokens,
        temperature=r.temperature, top_p=r.top_p, top_k=0, shuffle_dataset=False, remove_unused_columns=False,
        max_grad_norm=g.max_grad_norm, weight_decay=g.weight_decay, lr_scheduler_type=g.lr_scheduler,
        warmup_steps=g.warmup_steps, logging_steps=1, save_strategy="steps", save_steps=updates * g.save_every,
        save_total_limit=g.save_total_limit, save_only_model=True,
        report_to="tensorboard" if config.tensorboard else "none", disable_tqdm=True,
        seed=g.seed, dataloader_num_workers=0, gradient_checkpointing=config.model.gradient_checkpointing,
        use_vllm=vllm, **kwargs,
    )


def strategy_args(config: TrainConfig, cuda: bool) -> dict[str, Any]:
    """TrainingArguments for data-parallel trainer workers: the process-group backend, and FSDP or
    DeepSpeed ZeRO-3 sharding (bf16 master weights on GPU; activation checkpointing from the model config)."""
    ray = config.ray
    if ray.trainer_workers == 1 and ray.strategy == "ddp":
        return {}
    backend = ray.backend if ray.backend != "auto" else ("nccl" if cuda else "gloo")
    out: dict[str, Any] = {"ddp_backend": backend, "ddp_find_unused_parameters": False}
    if ray.strategy == "fsdp":
        out.update(fsdp="full_shard auto_wrap", fsdp_config={
            "fsdp_version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "FULL_STATE_DICT", "activation_checkpointing": config.model.gradient_checkpointing})
    elif ray.strategy == "zero3":
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise TrainingError("ray.strategy zero3 needs DeepSpeed: pip install deepspeed (GPU machines)")
        out["deepspeed"] = {
            "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                                  "stage3_gather_16bit_weights_on_model_save": True},
            "bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
            "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}
    return out


def _step_callback(writer: MetricsWriter, trainer_box: dict[str, Any], config: TrainConfig, out_dir: Path) -> Any:
    """A TRL/transformers callback writing one metrics record when an RL step's last update is logged."""
    from transformers import TrainerCallback

    updates = config.grpo.updates_per_step
    save_steps = updates * config.grpo.save_every

    class StepRecorder(TrainerCallback):
        def __init__(self) -> None:
            self.logs: list[dict[str, Any]] = []

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ARG002 - TrainerCallback.on_log's signature
            if not logs or "train_runtime" in logs or "loss" not in logs:
                return
            self.logs.append(dict(logs))
            if state.global_step % updates != 0:
                return
            step = state.global_step // updates
            trainer = trainer_box["trainer"]
            rollout = trainer.awm.step_metrics.get(step, {})
            record: dict[str, Any] = {"step": step, "steps": config.grpo.steps, "global_step": state.global_step}
            record.update({k: v for k, v in rollout.items() if k not in ("started_at", "scored_at", "step")})
            for key in TRAIN_KEYS:
                values = [entry[key] for entry in self.logs if isinstance(entry.get(key), (int, float))]
                if values:
                    record[key] = aggregate(key, values)
            now = time.time()
            record["train_s"] = round(now - rollout.get("scored_at", now), 3)
            record["step_s"] = round(now - rollout.get("started_at", now), 3)
            record["tokens_seen"] = int(state.num_input_tokens_seen)
            will_save = state.global_step % save_steps == 0
            record["checkpoint"] = str(out_dir / f"checkpoint-{state.global_step}") if will_save else None
            record["time"] = now
            self.logs = []
            writer.write(record)

    return StepRecorder()


def param_snapshot(model: Any, max_elements: int = 16_000_000) -> dict[str, Any]:
    """CPU copies of the model's parameters, spread over the layers, up to `max_elements` in total
    (all of a tiny model; a sample of a large one)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    stride = max(1, sum(p.numel() for _, p in params) // max_elements)
    picked: dict[str, Any] = {}
    total = 0
    for name, param in params[::stride] if stride > 1 else params:
        if total + param.numel() > max_elements and picked:
            continue
        picked[name] = param.detach().float().cpu().clone()
        total += param.numel()
    return picked


def param_delta(before: dict[str, Any], model: Any) -> dict[str, float]:
    """How far the trained weights moved from `before` (max absolute and L2 difference)."""
    max_abs, sq = 0.0, 0.0
    for name, param in model.named_parameters():
        if name in before:
            diff = (param.detach().float().cpu() - before[name]).abs()
            max_abs = max(max_abs, float(diff.max()))
            sq += float((diff ** 2).sum())
    return {"param_delta_max": max_abs, "param_delta_l2": sq ** 0.5, "compared_tensors": float(len(before))}


def run_training(config: TrainConfig, on_event: EventSink | None = None) -> dict[str, Any]:
    """Run the whole job here; returns the summary (also written to `summary.json`)."""
    import torch

    from awm_rl.agent.loop import LoopConfig
    from awm_rl.runtime.pool import EnvironmentPool
    from awm_rl.training import tasks as T
    from awm_rl.training.rollouts import CompactToolsPool

    started = time.time()
    config = config.resolved()
    out_dir = config.resolved_output_dir()
    rank, world = dist_rank()
    if rank:  # data-parallel worker: rank 0 writes the files and reports progress
        on_event = None
    out_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        atomic_write_json(out_dir / "config.json", config.model_dump())
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    threads = config.ray.torch_threads or load_settings().cluster.torch_threads
    if threads or not cuda_available():
        torch.set_num_threads(threads or max(1, os.cpu_count() or 1))

    # -- tasks ---------------------------------------------------------------------------------------
    store = ArtifactStore(config.store_root())
    pinned = config.environments.catalog_version
    try:
        catalog_file = (catalog_version_path(store, pinned) if pinned else
                        Path(config.environments.catalog) if config.environments.catalog else None)
        entries, version = T.read_catalog(store, catalog_file)
        scenarios = T.select_environments(entries, config.environments.scenarios, config.environments.max_scenarios,
                                          config.environments.if_not_ready)
        if pinned:  # exactly that set: each environment to train on still as the version recorded it
            verify_catalog_version(store, pinned, scenarios)
        if config.environments.scenarios and scenarios != list(config.environments.scenarios):
            _emit(on_event, f"environments {config.environments.scenarios} are not all ready in the catalog; "
                            f"training on the catalog's ready environments {scenarios} instead (if_not_ready: use_catalog)")
        excluded = T.audit_exclusions(store, scenarios, config.environments.verifier_audit, entries)
        tasks = T.training_tasks(store, scenarios, judge_mode=config.judge.mode, excluded=excluded,
                                 max_tasks_per_scenario=config.environments.max_tasks_per_scenario)
    except (T.CatalogError, CatalogVersionError) as exc:
        raise TrainingError(str(exc)) from None
    provenance = run_provenance(store, scenarios, entries)  # summary.json: catalog_digest, environments (versions)
    if provenance["changed_since_catalog"]:
        _emit(on_event, "environments changed since the catalog was written (`awm catalog --refresh` records them): "
              + "; ".join(provenance["changed_since_catalog"]))
    schedule = T.step_schedule(tasks, config.grpo.steps, config.grpo.tasks_per_step, config.grpo.seed)
    _emit(on_event, f"{len(tasks)} tasks in {len(scenarios)} environments ({', '.join(scenarios)}); "
          f"{config.grpo.steps} steps x {config.grpo.tasks_per_step} tasks x G={config.grpo.group_size}",
          catalog=version.as_dict(), excluded=excluded)

    loop_config = LoopConfig(max_turns=config.rollout.max_turns, window=config.rollout.effective_window,
                             snapshot_dir=out_dir / "databases")
    pool = EnvironmentPool(store.root, num_hosts=config.environments.env_hosts, ray_address=config.ray.address,
                           call_timeout_s=config.environments.call_timeout_s, prefetch=2,
                           actor_options={"resources": config.environments.env_host_resources}
                           if config.environments.env_host_resources else None)
    env_pool = CompactToolsPool(pool) if config.rollout.tool_listing == "compact" else pool
    env_isolation = pool.isolation()
    try:
        # -- model -------------------------------------------------------------------------------------
        model_path = _initial_model(config, env_pool, tasks, rank, world)
        vllm = use_vllm(config)
        _emit(on_event, f"policy {model_path}; generation with "
              f"{'vLLM (' + config.generation.vllm_mode + ')' if vllm else 'transformers'} on {'GPU' if cuda_available() else 'CPU'}")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
        warm_report = None
        if config.warm_start.enabled and rank:  # rank 0 warm-starts; the others load what it saved
            barrier()
            model_path = str(out_dir / "warm_start")
        elif config.warm_start.enabled:
            from awm_rl.training.warm_start import supervised_steps, warm_start_samples

            t0 = time.time()
            samples, ran, kept = warm_start_samples(env_pool, tasks, tokenizer, loop_config,
                                                    tasks_per_scenario=config.warm_start.tasks_per_scenario)
            if not samples:
                raise TrainingError(f"warm start: none of {ran} scripted episodes passed the format checks "
                                    f"(environments {scenarios}); see {loop_config.snapshot_dir}")
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
            if cuda_available():
                model.to("cuda")
            losses = supervised_steps(model, tokenizer, samples, steps=config.warm_start.steps,
                                      learning_rate=config.warm_start.learning_rate, seed=config.grpo.seed,
                                      target_loss=config.warm_start.target_loss)
            model_path = str(out_dir / "warm_start")
            model.to("cpu").save_pretrained(model_path)
            tokenizer.save_pretrained(model_path)
            del model
            warm_report = {"episodes": ran, "kept": kept, "samples": len(samples), "steps": len(losses),
                           "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
                           "wall_s": round(time.time() - t0, 2), "model": model_path}
            _emit(on_event, f"warm start: {kept}/{ran} scripted episodes, {len(samples)} samples, loss "
                  f"{losses[0]:.3f} -> {losses[-1]:.3f} in {warm_report['wall_s']:.1f}s", warm_start=warm_report)
            if world > 1:
                barrier()
        summary = _train(config, out_dir, model_path, tokenizer, env_pool, tasks, schedule, loop_config, vllm, on_event)
    finally:
        pool.close()
    summary.update({"catalog": version.as_dict(), **provenance, "scenarios": scenarios, "tasks": len(tasks), "excluded_tasks": excluded,
                    "warm_start": warm_report, "initial_model": model_path, "wall_s": round(time.time() - started, 2),
                    "output_dir": str(out_dir), "config": config.model_dump(), "trainer_workers": world,
                    "os_isolation": env_isolation})
    if rank:
        return summary
    atomic_write_json(out_dir / SUMMARY_FILE, summary)
    if on_event:
        on_event({"kind": "done", "message": f"training done in {summary['wall_s']:.0f}s: {summary['final_model']}",
                  "summary": {k: v for k, v in summary.items() if k != "config"}})
    return summary


# The tiny model's tokenizer, fitted to the run's prompts: merges across words make the JSON of tool schemas a
# few tokens (on the corpus the step prompts were 3.6x shorter than with the generic tokenizer, 818 tokens at most
# instead of 2,908), and a model of 200k parameters on CPU spends its time in attention over the prompt.
TINY_VOCAB_SIZE = 2048


def _initial_model(config: TrainConfig, pool: Any, tasks: list, rank: int, world: int) -> str:
    """The policy to start from: the configured path, or the tiny Qwen3 with its tokenizer fitted to what this run's
    prompts hold (each environment's tool listing as the policy reads it, and the tasks), built by rank 0."""
    if not config.model.tiny:
        return config.model.path or ""  # ModelConfig: exactly one of path or tiny is set
    from awm_rl.agent.loop import scenario_tools
    from awm_rl.agent.tiny_model import build_tiny_qwen3, tiny_model_folder

    if config.model.tiny_cache_dir is None:  # resolved() sets it for a tiny model
        raise ValueError("model.tiny_cache_dir is not set: pass the config through TrainConfig.resolved()")
    folder = ""
    if rank == 0:  # one builder: workers writing the same files at once read each other's partial files
        texts = [json.dumps(scenario_tools(pool, scenario), ensure_ascii=False)  # as the loop shows it
                 for scenario in dict.fromkeys(r.scenario for r in tasks)]
        texts += [r.task for r in tasks]
        build_tiny_qwen3(config.model.tiny_cache_dir, vocab_size=TINY_VOCAB_SIZE, extra_texts=texts,
                         merge_across_words=True)
        folder = str(tiny_model_folder(config.model.tiny_cache_dir, vocab_size=TINY_VOCAB_SIZE, extra_texts=texts,
                                       merge_across_words=True))
    # Every rank loads the folder rank 0 built (a rank that fitted its own texts would name a folder never built).
    return str(from_rank0(folder)) if world > 1 else folder


def _train(config: TrainConfig, out_dir: Path, model_path: str, tokenizer: Any, pool: Any, tasks: list, schedule: list,
           loop_config: Any, vllm: bool, on_event: EventSink | None) -> dict[str, Any]:
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    from awm_rl.training import tasks as T
    from awm_rl.training.trainer import AWMGRPOTrainer, RolloutContext, awm_episode_reward

    rank, _ = dist_rank()
    writer = MetricsWriter(out_dir / f"rank{rank}" if rank else out_dir, on_event, tensorboard=config.tensorboard and not rank)
    if config.tensorboard:  # TRL's TensorBoardCallback (report_to) writes beside the step metrics
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(out_dir / TENSORBOARD_DIR)
    box: dict[str, Any] = {}
    records, curriculum = _difficulty_and_curriculum(config, tasks, schedule, rank, on_event)
    context = RolloutContext(
        pool=pool, judge=build_judge(config), records={(r.scenario, r.task_idx): r for r in tasks},
        loop_config=loop_config, schedule=schedule, out_dir=out_dir, max_context_tokens=config.rollout.max_context_tokens,
        concurrency=config.rollout.concurrency, batch_wait_s=config.rollout.batch_wait_ms / 1000.0,
        micro_batch_samples=config.grpo.micro_batch_samples, log_samples=config.log_samples, on_event=on_event,
        curriculum=curriculum, difficulty=records)
    trainer = AWMGRPOTrainer(model=model_path, reward_funcs=[awm_episode_reward], args=grpo_args(config, out_dir, vllm=vllm),
                             train_dataset=Dataset.from_list(T.dataset_rows(schedule)), processing_class=tokenizer,
                             callbacks=[_step_callback(writer, box, config, out_dir)], awm=context)
    box["trainer"] = trainer
    trainer.remove_callback(PrinterCallback)  # progress goes through our step records and events
    before = param_snapshot(trainer.model)
    trainer._prefetch(0)
    try:
        trainer.train()
    finally:
        writer.close()
    final = out_dir / "final"
    trainer.save_model(str(final))  # every rank: sharded weights are gathered for the save
    if rank == 0:
        tokenizer.save_pretrained(str(final))
    delta = param_delta(before, trainer.model)
    curves = plot_curves(writer.records, out_dir / CURVES_FILE) if writer.records and rank == 0 else None
    last = writer.records[-1] if writer.records else {}
    checkpoints = [str(p) for p in sorted((p for p in out_dir.glob("checkpoint-*") if p.is_dir()),
                                          key=lambda p: int(p.name.split("-")[-1]))]
    times = time_summary(writer.records)
    _emit(on_event, format_time_split(times), time_split=times)
    return {"steps": len(writer.records), "final_model": str(final), "checkpoints": checkpoints, "time_split": times,
            "last_checkpoint": checkpoints[-1] if checkpoints else None, "metrics_file": str(out_dir / METRICS_FILE),
            "curves": str(curves) if curves else None, "final_metrics": last, "weights": delta,
            "tensorboard": str(out_dir / TENSORBOARD_DIR) if config.tensorboard else None,
            "generation": "vllm" if vllm else "transformers", "trainer_processes": trainer.accelerator.num_processes,
            "difficulty_run": records.run, "curriculum": curriculum.summary() if curriculum else None}


def _difficulty_and_curriculum(config: TrainConfig, tasks: list, schedule: list, rank: int,
                               on_event: EventSink | None) -> tuple[Any, Any]:
    """The recorder adding every rollout to the store's per-task difficulty records (policy `grpo:<name>`), and
    the curriculum when `curriculum.enabled` (its pass rates start from those records: `curriculum.prior`)."""
    import re

    from awm_resources.difficulty import load_difficulty, new_run_id
    from awm_rl.training.curriculum import Curriculum
    from awm_rl.training.rollouts import StepRecords

    run = new_run_id("train-" + re.sub(r"[^A-Za-z0-9._-]+", "-", config.name).strip("-."))
    records = StepRecords(config.store_root(), run=run, policy=f"grpo:{config.name}", rank=rank)
    cur = config.curriculum
    if not cur.enabled:
        return records, None
    prior = None
    if cur.prior == "store":
        index = load_difficulty(ArtifactStore(config.store_root()))
        for problem in index.problems:
            _emit(on_event, f"curriculum: a difficulty record could not be read and is left out: {problem}")
        prior = index.tasks(policies=cur.prior_policies or None)
    curriculum = Curriculum(cur, tasks, schedule, group_size=config.grpo.group_size,
                            tasks_per_step=config.grpo.tasks_per_step, seed=config.grpo.seed, prior=prior)
    known = sum(1 for key in curriculum.tasks if curriculum.attempts[key])
    _emit(on_event, f"curriculum: {len(tasks)} tasks, {known} with prior records, band {list(cur.band)}, "
          f"dynamic sampling {'on' if cur.dynamic_sampling else 'off'}, retire after "
          f"{cur.retire_after or 'never'}; difficulty records under run {run}")
    return records, curriculum
