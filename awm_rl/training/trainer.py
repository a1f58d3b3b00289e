"""`AWMGRPOTrainer`: TRL's GRPOTrainer with multi-turn environment rollouts and per-turn samples.

Why a subclass and not `environment_factory` / `rollout_func`: TRL's tool loop parses tool calls
with the chat template's parser and has no step-level format check with early stop, it feeds the
policy the whole history (our turns see a window), and `rollout_func` must return one row per
prompt, while history-aware training needs one row per model turn. So generation and scoring
(`_generate_and_score_completions`) are replaced; everything else is TRL's: the sampler that
repeats each task G times, generation through vLLM or transformers (`_generate_single_turn`, with
weight sync), the clipped objective (token-level ratios by default), KL, the optimiser, logging and
checkpoints.

One generation round (one RL step):
1. the step's G x tasks rollouts run the shared agent loop against the Ray environment pool; their
   turns are generated in batches (`rollouts.run_rollouts`);
2. the judge classifies the episodes that ended normally; the reward rule gives -1 / 0 / 0.1 / 1;
3. advantages are group-relative over the G rollouts of a task (TRL's formula); a rollout that failed
   on the policy side (context overflow, a generation that failed even when retried alone) is
   unscorable: out of its group's statistics, advantage 0, no samples, counted per step;
4. each rollout becomes one sample per turn carrying its advantage; the count is padded with
   loss-free filler rows to a multiple of the mini-batch count; old / reference log-probs are
   computed on exactly the (windowed) contexts the policy generated from; the engine correction
   (pi_trainer / pi_engine, `objective.engine_ratio`) is folded into per-token advantages, with what
   it masked or capped counted in the step's metrics;
5. the next step's environment instances are created on the hosts while this step trains.
An update whose loss cannot have a gradient (every loss token's advantage 0, beta 0, no entropy bonus:
`objective.carries_gradient`, agreed across processes) does not step the optimiser: AdamW would otherwise
keep moving every weight along its momentum with no signal behind it; such updates are counted per step
(`updates_skipped`). DeepSpeed steps inside its backward pass, so there the update is not skipped.
Long mini-batches are cut into micro-batches of `micro_batch_samples` rows for the backward pass;
the loss is the mean over real rows (filler rows do not dilute it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from awm_rl.agent.loop import EpisodeSpec, LoopConfig, ToolEnvironments, discard_snapshot
from awm_rl.reward import Judge, TaskRecord, score_episodes
from awm_rl.training.metrics import is_policy_failure, merge_rollout_metrics, rollout_metrics
from awm_rl.training.objective import carries_gradient, engine_ratio, fold_engine_ratio, group_advantages, real_rows
from awm_rl.training.rollouts import (
    BusyClock,
    GenerationBroker,
    RecordingPolicy,
    ScoredRound,
    StepRecords,
    StepRollouts,
    TimedPool,
    run_rollouts,
    time_split,
)
from awm_rl.training.samples import (
    TurnSample,
    collate,
    length_chunks,
    pad_samples,
    samples_from_rollout,
    take_rows,
    trim_padding,
)


def awm_episode_reward(prompts: list[Any], completions: list[Any],  # noqa: ARG001 - TRL's reward-function signature
                       awm_reward: list[float | None], **_: Any) -> list[float | None]:
    """The episode reward computed by the judge and reward rule (a dataset column set per rollout).

    Registered as TRL's reward function so TRL's reward plumbing (gathering across processes,
    logging under `rewards/awm_episode_reward`) applies unchanged. None for a policy-side failure:
    TRL then treats the rollout as unscorable (NaN), outside its group's statistics.
    """
    return [None if r is None else float(r) for r in awm_reward]


@dataclass
class RolloutContext:
    """What the trainer needs beyond TRL: the pool, the tasks, the judge, the loop and the schedule."""

    pool: ToolEnvironments
    judge: Judge
    records: dict[tuple[str, int], TaskRecord]
    loop_config: LoopConfig
    schedule: list[list[TaskRecord]]
    out_dir: Path
    max_context_tokens: int
    concurrency: int = 256
    batch_wait_s: float = 0.02
    micro_batch_samples: int = 8
    log_samples: bool = True
    on_event: Callable[[dict[str, Any]], None] | None = None
    step_metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    # awm_rl.training.curriculum.Curriculum: chooses each step's tasks and refills groups without reward
    # variance (None: the fixed schedule, every group trained on)
    curriculum: Any = None
    difficulty: StepRecords | None = None  # adds every scored rollout to the store's per-task difficulty records


class AWMGRPOTrainer(GRPOTrainer):
    """GRPO over multi-turn environment episodes with history-aware per-turn samples (see module doc)."""

    _last_loaded_step: int  # GRPOTrainer's: the step whose weights vLLM holds

    def __init__(self, *args: Any, awm: RolloutContext, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.awm = awm
        self.awm_round = 0  # generation rounds done (= RL steps started)
        # The engine correction is applied here for every backend (folded into the advantages); TRL's own
        # multiplication, which it does only for its vLLM path, is switched off so it is not applied twice.
        self.awm_engine_correction = bool(self.args.vllm_importance_sampling_correction)
        self.vllm_importance_sampling_correction = False
        self._awm_policy_logps: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]] | None = None
        self._awm_signal = False  # whether a mini-batch of the update under way can have a gradient
        self.awm_skipped_updates = 0
        if not self.is_deepspeed_enabled:  # DeepSpeed steps inside backward: nothing left to skip
            self.add_callback(_SkipUpdatesWithoutSignal(self))

    # -- events ------------------------------------------------------------------------------------
    def _emit(self, message: str, **data: Any) -> None:
        if self.awm.on_event and self.accelerator.is_main_process:
            self.awm.on_event({"kind": "info", "message": message, **data})

    # -- generation ----------------------------------------------------------------------------------
    def _awm_generate(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        """One batch of turns through TRL's single-turn path (vLLM or transformers), or, with several trainer
        processes and a vLLM server, straight to the server: TRL's server path gathers every process's prompts
        and broadcasts the answers (collectives), and turn batches here come at each process's own pace."""
        if self.use_vllm and self.vllm_mode == "server" and self.accelerator.num_processes > 1:
            return self._awm_server_generate(prompts)
        completion_ids, logprobs = self._generate_single_turn(prompts, None, {}, 1)
        return [list(c) for c in completion_ids], logprobs

    def _awm_server_generate(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        if getattr(self, "_awm_client", None) is None:
            from trl.generation.vllm_client import VLLMClient

            args = self.args
            url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
            self._awm_client = VLLMClient(base_url=url, connection_timeout=args.vllm_server_timeout)
        out = self._awm_client.generate(
            prompts=prompts, n=1, repetition_penalty=self.repetition_penalty, temperature=self.temperature,
            top_p=self.top_p, top_k=self.top_k, min_p=0.0 if self.min_p is None else self.min_p,
            max_tokens=self.max_completion_length, logprobs=0, generation_kwargs=self.args.generation_kwargs)
        return [list(c) for c in out["completion_ids"]], [[lp[0] for lp in seq] for seq in out["logprobs"]]

    def _awm_sync_weights(self) -> None:
        """Push the policy's weights to vLLM once per generation round, on every process at the same point
        (gathering sharded weights is a collective), before any turn is generated."""
        if self.use_vllm and self.state.global_step != self._last_loaded_step:
            self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step

    def _prefetch(self, round_index: int) -> None:
        """Create the instances of step `round_index`'s rollouts on the hosts ahead of time."""
        if round_index >= len(self.awm.schedule):
            return
        counts: dict[str, int] = {}
        for record in self.awm.schedule[round_index]:
            counts[record.scenario] = counts.get(record.scenario, 0) + self.num_generations
        share = self.accelerator.num_processes  # each data-parallel process runs its share of the rollouts
        for scenario, n in counts.items():
            pool = self.awm.pool  # an EnvironmentPool here (or a wrapper forwarding to one), not any ToolEnvironments
            pool.prefetch_instances(scenario, -(-n // share))  # type: ignore[attr-defined]  # see the line above

    # -- the generation round ------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        self.awm_round += 1
        step = self.awm_round
        started, wall_start = time.perf_counter(), time.time()

        self._awm_sync_weights()

        # 1-2. rollouts and judging; a curriculum chooses the step's tasks and refills the groups whose rewards
        # are all equal (awm_rl.training.curriculum), which then give no samples
        curriculum = self.awm.curriculum
        if curriculum is not None:
            inputs = curriculum.rows_for(step)
        first = self._awm_scored_round(inputs, step, started, prefetch=mode == "train" and curriculum is None)
        if curriculum is not None:
            done = curriculum.fill_step(step, first, lambda rows: self._awm_scored_round(rows, step, time.perf_counter()))
            if mode == "train":
                self._prefetch(step)  # the curriculum has chosen the next step's tasks
        else:
            done = StepRollouts.single(first)
        inputs, rollouts, scores, failed = done.rows, done.rollouts, done.scores, done.failed
        episodes = [r.episode for r in rollouts]
        rollout_s, judge_s, split = done.rollout_s, done.judge_s, done.split

        # 3. group-relative advantages (TRL's reward plumbing, then its "sum_then_normalize" formula)
        rows = [{**row, "awm_reward": None if bad else score.reward}
                for row, score, bad in zip(inputs, scores, failed, strict=True)]
        prompts = [row.get("prompt") for row in rows]
        completions = [e.steps[-1].response if e.steps else "" for e in episodes]
        last_ids = [r.turns[-1].completion_ids if r.turns else [] for r in rollouts]
        rewards_per_func = self._calculate_rewards(rows, prompts, completions, last_ids)
        rewards, advantages, zero_std = group_advantages(rewards_per_func, self.reward_weights, num_generations,
                                                         self.scale_rewards)
        start = self.accelerator.process_index * len(inputs)
        local_adv = advantages[start:start + len(inputs)].tolist()
        local_rewards = rewards[start:start + len(inputs)].tolist()

        # 4. per-turn samples (none from a policy-side failure: it carries no learning signal)
        samples: list[TurnSample] = []
        for i, (rollout, adv, reward, bad, keep) in enumerate(zip(rollouts, local_adv, local_rewards, failed, done.train,
                                                                  strict=True)):
            if not bad and keep:
                samples += samples_from_rollout(rollout.episode, rollout.turns, reward=reward, advantage=adv, rollout=i)
        real = len(samples)
        counts = self.accelerator.gather(torch.tensor([real], device=device))
        if int(counts.max()) == 0 and all(done.train):  # (a curriculum may have left every group out: no samples)
            reasons = sorted({f"{e.termination}: {(e.termination_detail or '')[:200]}" for e in episodes})
            raise RuntimeError(f"step {step}: none of the {len(episodes)} rollouts produced a trainable model turn "
                               f"({'; '.join(reasons[:3])})")
        if not samples:  # this process has nothing to learn from: one loss-free row keeps collectives in step
            samples = [_empty_sample(self._tokenizer)]
        samples = pad_samples(samples, self.args.steps_per_generation, minimum=int(counts.max()))
        batch = collate(samples, self._tokenizer.pad_token_id, device)
        loss_mask = batch["completion_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        t_logps = time.perf_counter()
        engine = self._add_logps(batch)
        logps_s = time.perf_counter() - t_logps

        # 5. bookkeeping
        prompt_tokens = sum(len(s.prompt_ids) for s in samples[:real])
        completion_tokens = sum(len(s.completion_ids) for s in samples[:real])
        if mode == "train":
            self.state.num_input_tokens_seen += prompt_tokens + completion_tokens
        metrics = rollout_metrics(episodes, scores)
        if self.accelerator.num_processes > 1:  # every process ran its share of the step's rollouts
            from accelerate.utils import gather_object

            metrics = merge_rollout_metrics(gather_object([metrics]))
        metrics.update({"step": step, "samples": real, "padding_samples": len(samples) - real, "updates_skipped": 0,
                        "frac_reward_zero_std": round(float(zero_std.float().mean()), 6),
                        "generation_batches": len(done.batches),
                        "generation_batch_mean": round(sum(done.batches) / max(1, len(done.batches)), 2),
                        "generation_failed_batches": done.broker_total("failed_batches"),
                        "generation_retried_prompts": done.broker_total("retried_prompts"),
                        "generation_failed_prompts": done.broker_total("failed_prompts"),
                        "rollout_s": round(rollout_s, 3), **split, "judge_s": round(judge_s, 3),
                        "logps_s": round(logps_s, 3), **{k: _round(v) for k, v in engine.items()},
                        "started_at": wall_start, "scored_at": time.time()})
        if curriculum is not None and done.curriculum is not None:
            metrics.update(curriculum.metrics(done.curriculum))
        self.awm.step_metrics[step] = metrics
        m = self._metrics[mode]
        scored = rewards[~torch.isnan(rewards)]
        m["reward"].append(float(scored.mean()) if scored.numel() else 0.0)
        m["reward_std"].append(float(scored.std(unbiased=True)) if scored.numel() > 1 else 0.0)
        m["frac_reward_zero_std"].append(metrics["frac_reward_zero_std"])
        for key in ("completion_rate", "format_error_ratio", "environment_error_ratio", "policy_failure_ratio",
                    "turns_mean", "rollout_s", "generation_s", "env_s", "waiting_s"):
            m[f"awm/{key}"].append(float(metrics[key]))
        for key, name in (("engine_ratio_min", "min"), ("engine_ratio_mean", "mean"), ("engine_ratio_max", "max")):
            m[f"sampling/importance_sampling_ratio/{name}"].append(float(engine[key]))
        m["sampling/importance_sampling_masked_frac"].append(float(engine["engine_masked_frac"]))
        m["sampling/importance_sampling_capped_frac"].append(float(engine["engine_capped_frac"]))
        m["num_tokens"] = [self.state.num_input_tokens_seen]
        m["completions/mean_length"].append(completion_tokens / max(1, real))
        if self.accelerator.is_main_process:
            self._write_step_files(step, rollouts, scores, samples, failed)
        if done.broker_total("failed_prompts"):
            self._emit(f"step {step}: {done.broker_total('failed_prompts')} generation request(s) failed even alone "
                       f"({done.broker_errors[-1]}); their rollouts are left out of the group statistics")
        if curriculum is not None and done.curriculum is not None:
            self._emit(curriculum.message(done.curriculum), curriculum=done.curriculum)
        self._emit(f"step {step}: {len(episodes)} rollouts in {rollout_s:.1f}s (generation {split['generation_s']:.1f}s, "
                   f"environments {split['env_s']:.1f}s), judged in {judge_s:.1f}s, {real} samples, "
                   f"reward {metrics['reward_mean']:+.3f}")
        return batch

    def _awm_scored_round(self, inputs: list[dict[str, Any]], step: int, started: float, *,
                          prefetch: bool = False) -> ScoredRound:
        """Run `inputs` as episodes (environment calls clocked, generation batches served by this thread) and
        judge them (a policy-side failure gets no reward: unscorable); added to the difficulty records.
        `prefetch`: create the next step's instances while the judge runs."""
        specs = [EpisodeSpec(row["scenario"], int(row["task_idx"]), row["task"]) for row in inputs]
        broker = GenerationBroker(batch_wait_s=self.awm.batch_wait_s)
        clock = BusyClock()
        policy = RecordingPolicy(self._tokenizer, broker, eos_token_ids=list(self.eos_token_ids),
                                 max_response_tokens=self.max_completion_length,
                                 max_context_tokens=self.awm.max_context_tokens)
        rollouts = run_rollouts(TimedPool(self.awm.pool, clock), specs, policy, self._awm_generate,
                                self.awm.loop_config, concurrency=self.awm.concurrency)
        rollout_s = time.perf_counter() - started
        split = time_split(rollout_s, broker, clock)
        if prefetch:
            self._prefetch(step)  # step index `step` is the next round (0-based schedule)

        t_judge = time.perf_counter()
        episodes = [r.episode for r in rollouts]
        records = [self.awm.records[(s.scenario, s.task_idx)] for s in specs]
        scores = score_episodes(episodes, records, self.awm.judge)
        for episode in episodes:
            discard_snapshot(episode)
        judge_s = time.perf_counter() - t_judge
        scored = ScoredRound(list(inputs), rollouts, scores, [is_policy_failure(e) for e in episodes], rollout_s,
                             judge_s, split, broker)
        if self.awm.difficulty is not None:
            self.awm.difficulty.record(step, scored)
        return scored

    # -- log-probs on the recorded (windowed) contexts -----------------------------------------------------
    def _chunked_logps(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        n, width = batch["completion_ids"].shape
        out = torch.zeros((n, width), dtype=torch.float32, device=batch["completion_ids"].device)
        micro = self.awm.micro_batch_samples
        for rows in length_chunks(batch, micro):
            sub = trim_padding(take_rows(batch, rows))
            ids = torch.cat([sub["prompt_ids"], sub["completion_ids"]], dim=1)
            mask = torch.cat([sub["prompt_mask"], sub["completion_mask"]], dim=1)
            keep = sub["completion_ids"].size(1)
            logps, _, _ = self._get_per_token_logps_and_entropies(model, ids, mask, keep, batch_size=micro)
            out[rows, :keep] = logps.float()
        return out

    def _add_logps(self, batch: dict[str, Any]) -> dict[str, float]:
        """old (when updates go off-policy, or the engine correction needs them), reference (beta > 0) log-probs,
        and the engine correction folded into the advantages; returns the correction's statistics."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        sampling = batch.get("sampling_per_token_logps")
        correct = self.awm_engine_correction and sampling is not None
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if self.args.gradient_accumulation_steps % generate_every != 0 or correct:
                batch["old_per_token_logps"] = self._chunked_logps(self.model, batch)
            if self.beta != 0.0:
                if self.ref_model is None:
                    raise RuntimeError("beta > 0 needs a reference model (PEFT adapters are not supported here)")
                batch["ref_per_token_logps"] = self._chunked_logps(self.ref_model, batch)
        if self.use_vllm and self.awm_engine_correction and sampling is None:
            raise RuntimeError("the engine correction needs the sampling log-probs of every turn, and vLLM returned none")
        args = self.args
        # transformers generation: the sampler is the trainer itself (same weights, same process): ratio 1
        reference = batch["old_per_token_logps"] if correct else torch.zeros_like(batch["completion_mask"], dtype=torch.float32)
        ratio, stats = engine_ratio(reference, sampling if correct else None, batch["completion_mask"],
                                    args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_min,
                                    args.vllm_importance_sampling_clip_max)
        if correct:
            batch["advantages"] = fold_engine_ratio(batch["advantages"], ratio)
        stats["engine_correction"] = 1.0 if correct else 0.0
        return stats

    # -- loss in micro-batches -----------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        """TRL's; while `compute_loss` runs, the policy's log-probs are kept (detached) for the ratio metrics."""
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._awm_policy_logps is not None:
            self._awm_policy_logps.append(out[0].detach())
        return out

    def compute_loss(self, model, inputs, return_outputs=False,
                     num_items_in_batch=None):  # noqa: ARG002 - Trainer.compute_loss's signature
        """TRL's loss over micro-batches of `micro_batch_samples` rows (all but the last backpropagated here),
        weighted so the result is the loss of the mini-batch's real rows: filler rows do not dilute the mean
        (row-mean losses: grpo, dr_grpo), and across processes each real row weighs the same."""
        if return_outputs:
            raise ValueError("The GRPOTrainer does not support returning outputs")
        n = inputs["prompt_ids"].size(0)
        micro = self.awm.micro_batch_samples
        self._awm_signal = self._awm_signal or carries_gradient(
            inputs["advantages"], inputs["completion_mask"], beta=self.beta,
            entropy_bonus=bool(getattr(self, "_entropy_bonus_enabled", True)))
        real = real_rows(inputs)
        n_real = int(real.sum())
        row_mean = self.loss_type in ("grpo", "dr_grpo")
        if row_mean:  # the mean over this process's real rows, rescaled so processes average per row
            counts = self.accelerator.gather(real.sum().reshape(1).float())
            scale = n / max(1.0, float(counts.mean())) if n_real else 0.0
        else:
            scale = 1.0
        chunks = [torch.arange(n, device=inputs["prompt_ids"].device)] if n <= micro else length_chunks(inputs, micro)
        total_tokens = inputs["completion_mask"].sum().clamp(min=1)
        carried = torch.zeros((), device=inputs["prompt_ids"].device)
        self._awm_policy_logps = []
        ratio_stats = _RatioStats(1 - self.epsilon_low, 1 + self.epsilon_high)
        try:
            for index, rows in enumerate(chunks):
                sub = trim_padding(take_rows(inputs, rows))
                if self.loss_type == "bnpo":
                    weight = sub["completion_mask"].sum() / total_tokens
                elif self.loss_type in ("dapo", "cispo", "vespo"):
                    weight = 1.0  # already normalised by the generation batch's token count
                else:
                    weight = rows.numel() / n * scale
                loss = self._compute_loss(model, sub) * weight
                ratio_stats.add(self._awm_policy_logps.pop(), sub)
                if index < len(chunks) - 1:
                    self.accelerator.backward(loss)
                    carried = carried + loss.detach()
                else:
                    mode = "train" if self.model.training else "eval"
                    ratio_stats.log(self._metrics[mode])
                    return loss + carried
        finally:
            self._awm_policy_logps = None
        raise AssertionError("unreachable")

    # -- updates without signal -------------------------------------------------------------------------
    def _awm_before_optimizer_step(self) -> bool:
        """Called between gradient clipping and the optimiser step: when no process's mini-batch could have a
        gradient, drop the (all-zero) gradients so the step leaves the weights and the optimiser's state (moments,
        step count) as they were. Returns whether the update was skipped."""
        local = torch.tensor([1.0 if self._awm_signal else 0.0], device=self.accelerator.device)
        self._awm_signal = False
        if float(self.accelerator.gather(local).max()) > 0:
            return False
        for param in self.model.parameters():
            param.grad = None  # AdamW (and every torch optimiser) leaves a parameter without a gradient untouched
        self.awm_skipped_updates += 1
        metrics = self.awm.step_metrics.get(self.awm_round)
        if metrics is not None:
            metrics["updates_skipped"] = metrics.get("updates_skipped", 0) + 1
        return True

    # -- files -----------------------------------------------------------------------------------------
    def _write_step_files(self, step: int, rollouts: list, scores: list, samples: list[TurnSample],
                          failed: list[bool]) -> None:
        folder = self.awm.out_dir / "steps" / f"step_{step:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "episodes.jsonl").open("w", encoding="utf-8") as fh:
            for i, (rollout, score, bad) in enumerate(zip(rollouts, scores, failed, strict=True)):
                episode = rollout.episode
                record = {"rollout": i, "scenario": episode.scenario, "task_idx": episode.task_idx,
                          "termination": episode.termination, "detail": episode.termination_detail,
                          "outcome": "policy_failure" if bad else score.outcome, "reward": None if bad else score.reward,
                          "turns": episode.turns}
                if self.awm.log_samples:  # whole conversations: large at scale
                    record["messages"] = episode.messages
                    record["steps"] = [{"turn": s.turn, "response": s.response, "format": s.format}
                                       for s in episode.steps]
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        if self.awm.log_samples:
            with (folder / "samples.jsonl").open("w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(json.dumps(sample.describe(self._tokenizer), ensure_ascii=False) + "\n")


def _round(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def _empty_sample(tokenizer: Any) -> TurnSample:
    """A one-token, loss-free row for a process whose rollouts all failed on the policy side."""
    token = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return TurnSample(prompt_ids=[token], completion_ids=[token], advantage=0.0, reward=0.0, scenario="",
                      task_idx=-1, rollout=-1, turn=-1, padding=True)


class _SkipUpdatesWithoutSignal(TrainerCallback):
    """Runs `AWMGRPOTrainer._awm_before_optimizer_step` at the Trainer's hook between clipping and the step."""

    def __init__(self, trainer: AWMGRPOTrainer) -> None:
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ARG002 - TrainerCallback's signature
        self.trainer._awm_before_optimizer_step()


class _RatioStats:
    """min / mean / max of the policy ratio pi_theta / pi_old over a mini-batch's loss tokens, and the fraction
    outside the clip range [1 - eps, 1 + eps_high] (whatever the advantage's sign), logged per update."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high
        self.min, self.max, self.sum, self.count, self.outside = math.inf, -math.inf, 0.0, 0, 0

    def add(self, logps: torch.Tensor, sub: dict[str, Any]) -> None:
        mask = sub["completion_mask"].bool()
        old = sub.get("old_per_token_logps")
        if old is None:
            ratio = torch.ones_like(logps)  # on-policy update: pi_old is this very policy
        else:
            ratio = torch.exp(logps.float() - old.float())
        values = ratio[mask]
        if values.numel():
            self.min = min(self.min, float(values.min()))
            self.max = max(self.max, float(values.max()))
            self.sum += float(values.sum())
            self.count += values.numel()
            self.outside += int(((values < self.low) | (values > self.high)).sum())

    def log(self, metrics: dict[str, list[float]]) -> None:
        if not self.count:
            return
        metrics["policy_ratio/min"].append(self.min)
        metrics["policy_ratio/mean"].append(self.sum / self.count)
        metrics["policy_ratio/max"].append(self.max)
        metrics["policy_ratio/outside_clip_frac"].append(self.outside / self.count)
