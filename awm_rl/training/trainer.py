"""`AWMGRPOTrainer`: TRL's GRPOTrainer with multi-turn environment rollouts and per-turn samples.

Why a subclass and not `environment_factory` / `rollout_func`: TRL's tool loop parses tool calls
with the chat template's parser and has no step-level format check with early stop, it feeds the
policy the whole history (our turns see a window), and `rollout_func` must return one row per
prompt, while history-aware training needs one row per model turn. So generation and scoring
(`_generate_and_score_completions`) are replaced; everything else is TRL's: the sampler that
repeats each task G times, generation through vLLM or transformers (`_generate_single_turn`, with
weight sync), the clipped objective with sequence-level importance sampling, KL, the optimiser,
logging and checkpoints.

One generation round (one RL step):
1. the step's G x tasks rollouts run the shared agent loop against the Ray environment pool; their
   turns are generated in batches (`rollouts.run_rollouts`);
2. the judge classifies the episodes that ended normally; the reward rule gives -1 / 0 / 0.1 / 1;
3. advantages are group-relative over the G rollouts of a task (TRL's formula);
4. each rollout becomes one sample per turn carrying its advantage; the count is padded to a
   multiple of the mini-batch count; old / reference log-probs are computed on exactly the
   (windowed) contexts the policy generated from;
5. the next step's environment instances are created on the hosts while this step trains.
Long mini-batches are cut into micro-batches of `micro_batch_samples` rows for the backward pass.
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
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd

from awm_rl.agent.loop import EnvironmentPool, EpisodeSpec, LoopConfig, discard_snapshot
from awm_rl.reward import Judge, TaskRecord, score_episodes
from awm_rl.training.metrics import rollout_metrics
from awm_rl.training.rollouts import GenerationBroker, RecordingPolicy, run_rollouts
from awm_rl.training.samples import (
    TurnSample, collate, length_chunks, pad_samples, samples_from_rollout, take_rows, trim_padding,
)


def awm_episode_reward(prompts: list[Any], completions: list[Any], awm_reward: list[float], **_: Any) -> list[float]:
    """The episode reward computed by the judge and reward rule (a dataset column set per rollout).

    Registered as TRL's reward function so TRL's reward plumbing (gathering across processes,
    logging under `rewards/awm_episode_reward`) applies unchanged.
    """
    return [float(r) for r in awm_reward]


@dataclass
class RolloutContext:
    """What the trainer needs beyond TRL: the pool, the tasks, the judge, the loop and the schedule."""

    pool: EnvironmentPool
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


class AWMGRPOTrainer(GRPOTrainer):
    """GRPO over multi-turn environment episodes with history-aware per-turn samples (see module doc)."""

    def __init__(self, *args: Any, awm: RolloutContext, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.awm = awm
        self.awm_round = 0  # generation rounds done (= RL steps started)

    # -- events ------------------------------------------------------------------------------------
    def _emit(self, message: str, **data: Any) -> None:
        if self.awm.on_event and self.accelerator.is_main_process:
            self.awm.on_event({"kind": "info", "message": message, **data})

    # -- generation ----------------------------------------------------------------------------------
    def _awm_generate(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        """One batch of turns through TRL's single-turn path (vLLM with weight sync, or transformers)."""
        completion_ids, logprobs = self._generate_single_turn(prompts, None, {}, 1)
        return [list(c) for c in completion_ids], logprobs

    def _prefetch(self, round_index: int) -> None:
        """Create the instances of step `round_index`'s rollouts on the hosts ahead of time."""
        if round_index >= len(self.awm.schedule):
            return
        counts: dict[str, int] = {}
        for record in self.awm.schedule[round_index]:
            counts[record.scenario] = counts.get(record.scenario, 0) + self.num_generations
        for scenario, n in counts.items():
            self.awm.pool.prefetch_instances(scenario, n)

    # -- the generation round ------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        self.awm_round += 1
        step = self.awm_round
        started, wall_start = time.perf_counter(), time.time()

        # 1. rollouts
        specs = [EpisodeSpec(row["scenario"], int(row["task_idx"]), row["task"]) for row in inputs]
        broker = GenerationBroker(batch_wait_s=self.awm.batch_wait_s)
        policy = RecordingPolicy(self._tokenizer, broker, eos_token_ids=list(self.eos_token_ids),
                                 max_response_tokens=self.max_completion_length,
                                 max_context_tokens=self.awm.max_context_tokens)
        rollouts = run_rollouts(self.awm.pool, specs, policy, self._awm_generate, self.awm.loop_config,
                                concurrency=self.awm.concurrency)
        rollout_s = time.perf_counter() - started
        if mode == "train":
            self._prefetch(step)  # step index `step` is the next round (0-based schedule)

        # 2. judge and reward
        t_judge = time.perf_counter()
        episodes = [r.episode for r in rollouts]
        records = [self.awm.records[(s.scenario, s.task_idx)] for s in specs]
        scores = score_episodes(episodes, records, self.awm.judge)
        for episode in episodes:
            discard_snapshot(episode)
        judge_s = time.perf_counter() - t_judge

        # 3. group-relative advantages (TRL's reward plumbing, then its "sum_then_normalize" formula)
        rows = [{**row, "awm_reward": score.reward} for row, score in zip(inputs, scores)]
        prompts = [row.get("prompt") for row in rows]
        completions = [e.steps[-1].response if e.steps else "" for e in episodes]
        last_ids = [r.turns[-1].completion_ids if r.turns else [] for r in rollouts]
        rewards_per_func = self._calculate_rewards(rows, prompts, completions, last_ids)
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        grouped = rewards.view(-1, num_generations)
        mean = grouped.mean(dim=1).repeat_interleave(num_generations)
        if self.scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        else:
            std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
        advantages = rewards - mean
        if self.scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
        zero_std = torch.isclose(nanstd(grouped, dim=1), torch.zeros(grouped.size(0), device=device))
        start = self.accelerator.process_index * len(inputs)
        local_adv = advantages[start:start + len(inputs)].tolist()
        local_rewards = rewards[start:start + len(inputs)].tolist()

        # 4. per-turn samples
        samples: list[TurnSample] = []
        for i, (rollout, adv, reward) in enumerate(zip(rollouts, local_adv, local_rewards)):
            samples += samples_from_rollout(rollout.episode, rollout.turns, reward=reward, advantage=adv, rollout=i)
        real = len(samples)
        if not real:
            reasons = sorted({f"{e.termination}: {(e.termination_detail or '')[:200]}" for e in episodes})
            raise RuntimeError(f"step {step}: none of the {len(episodes)} rollouts produced a model turn "
                               f"({'; '.join(reasons[:3])})")
        counts = self.accelerator.gather(torch.tensor([len(samples)], device=device))
        samples = pad_samples(samples, self.args.steps_per_generation, minimum=int(counts.max()))
        batch = collate(samples, self._tokenizer.pad_token_id, device)
        loss_mask = batch["completion_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        self._add_logps(batch)

        # 5. bookkeeping
        prompt_tokens = sum(len(s.prompt_ids) for s in samples[:real])
        completion_tokens = sum(len(s.completion_ids) for s in samples[:real])
        if mode == "train":
            self.state.num_input_tokens_seen += prompt_tokens + completion_tokens
        metrics = rollout_metrics(episodes, scores)
        metrics.update({"step": step, "samples": real, "padding_samples": len(samples) - real,
                        "frac_reward_zero_std": round(float(zero_std.float().mean()), 6),
                        "generation_batches": len(broker.batches),
                        "generation_batch_mean": round(sum(broker.batches) / max(1, len(broker.batches)), 2),
                        "rollout_s": round(rollout_s, 3), "judge_s": round(judge_s, 3),
                        "started_at": wall_start, "scored_at": time.time()})
        self.awm.step_metrics[step] = metrics
        m = self._metrics[mode]
        m["reward"].append(float(rewards.mean()))
        m["reward_std"].append(float(nanstd(rewards)))
        m["frac_reward_zero_std"].append(metrics["frac_reward_zero_std"])
        for key in ("completion_rate", "format_error_ratio", "environment_error_ratio", "turns_mean", "rollout_s"):
            m[f"awm/{key}"].append(float(metrics[key]))
        m["num_tokens"] = [self.state.num_input_tokens_seen]
        m["completions/mean_length"].append(completion_tokens / max(1, real))
        if self.accelerator.is_main_process:
            self._write_step_files(step, rollouts, scores, samples)
        self._emit(f"step {step}: {len(episodes)} rollouts in {rollout_s:.1f}s, judged in {judge_s:.1f}s, "
                   f"{real} samples, reward {metrics['reward_mean']:+.3f}")
        return batch

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

    def _add_logps(self, batch: dict[str, Any]) -> None:
        """old (when updates go off-policy or vLLM sampled), reference (beta > 0) and the vLLM IS ratio."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        vllm_is = self.use_vllm and self.vllm_importance_sampling_correction
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if self.args.gradient_accumulation_steps % generate_every != 0 or vllm_is:
                batch["old_per_token_logps"] = self._chunked_logps(self.model, batch)
            if self.beta != 0.0:
                if self.ref_model is None:
                    raise RuntimeError("beta > 0 needs a reference model (PEFT adapters are not supported here)")
                batch["ref_per_token_logps"] = self._chunked_logps(self.ref_model, batch)
        if vllm_is:
            sampling = batch.get("sampling_per_token_logps")
            if sampling is None:
                raise RuntimeError("vLLM importance-sampling correction needs the sampling log-probs of every turn")
            mask = batch["completion_mask"]
            diff = torch.nan_to_num((batch["old_per_token_logps"] - sampling) * mask, nan=0.0)
            if self.vllm_importance_sampling_mode in ("sequence_mask", "sequence_truncate"):
                diff = diff.sum(dim=-1, keepdim=True)
            ratio = torch.exp(diff)
            if self.vllm_importance_sampling_mode.endswith("truncate"):
                ratio = torch.clamp(ratio, min=self.vllm_importance_sampling_clip_min,
                                    max=self.vllm_importance_sampling_clip_max)
            else:
                low = self.vllm_importance_sampling_clip_min if self.vllm_importance_sampling_clip_min is not None else -math.inf
                high = self.vllm_importance_sampling_clip_max if self.vllm_importance_sampling_clip_max is not None else math.inf
                ratio = ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
            batch["importance_sampling_ratio"] = ratio

    # -- loss in micro-batches -----------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss, over micro-batches of `micro_batch_samples` rows (all but the last backpropagated
        here, weighted so the sum equals the loss of the whole mini-batch)."""
        if return_outputs:
            raise ValueError("The GRPOTrainer does not support returning outputs")
        n = inputs["prompt_ids"].size(0)
        micro = self.awm.micro_batch_samples
        if n <= micro:
            return self._compute_loss(model, trim_padding(inputs))
        total_tokens = inputs["completion_mask"].sum().clamp(min=1)
        chunks = length_chunks(inputs, micro)
        carried = torch.zeros((), device=inputs["prompt_ids"].device)
        for index, rows in enumerate(chunks):
            sub = trim_padding(take_rows(inputs, rows))
            if self.loss_type in ("bnpo",):
                weight = sub["completion_mask"].sum() / total_tokens
            elif self.loss_type in ("dapo", "cispo", "vespo"):
                weight = 1.0  # already normalised by the generation batch's token count
            else:
                weight = rows.numel() / n
            loss = self._compute_loss(model, sub) * weight
            if index < len(chunks) - 1:
                self.accelerator.backward(loss)
                carried = carried + loss.detach()
            else:
                return loss + carried
        raise AssertionError("unreachable")

    # -- files -----------------------------------------------------------------------------------------
    def _write_step_files(self, step: int, rollouts: list, scores: list, samples: list[TurnSample]) -> None:
        folder = self.awm.out_dir / "steps" / f"step_{step:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "episodes.jsonl").open("w", encoding="utf-8") as fh:
            for i, (rollout, score) in enumerate(zip(rollouts, scores)):
                episode = rollout.episode
                record = {"rollout": i, "scenario": episode.scenario, "task_idx": episode.task_idx,
                          "termination": episode.termination, "detail": episode.termination_detail,
                          "outcome": score.outcome, "reward": score.reward, "turns": episode.turns}
                if self.awm.log_samples:  # whole conversations: large at scale
                    record["messages"] = episode.messages
                    record["steps"] = [{"turn": s.turn, "response": s.response, "format": s.format}
                                       for s in episode.steps]
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        if self.awm.log_samples:
            with (folder / "samples.jsonl").open("w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(json.dumps(sample.describe(self._tokenizer), ensure_ascii=False) + "\n")
