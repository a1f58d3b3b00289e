"""The pieces of the GRPO objective the trainer computes itself, as plain tensor functions.

Kept apart from the trainer so each is tested against TRL's stock `GRPOTrainer` on a fixed batch
(tests/training/test_trl_parity.py):

- `group_advantages`: TRL's "sum_then_normalize" advantages, where a row whose reward is NaN
  (a policy-side failure: context overflow, a failed generation) is left out of its group's mean
  and std and gets advantage 0, as TRL does for unscorable completions;
- `engine_ratio`: TRL's vllm_importance_sampling_correction (pi_trainer / pi_engine per turn or per
  token, masked or truncated outside the bounds), returning what it masked or capped as numbers
  instead of zeroing silently;
- `fold_engine_ratio`: the ratio applied through the advantages. TRL multiplies the per-token loss
  by the ratio only when it generates with vLLM itself; since the ratio is >= 0,
  -min(r1*A, r2*A) * w == -min(r1*(A*w), r2*(A*w)), so A*w gives TRL's loss for any backend;
- `carries_gradient`: whether an update's loss can have a gradient at all (the trainer does not step
  the optimiser on one that cannot: AdamW would still move every weight along its momentum).
"""

from __future__ import annotations

import math
from typing import Any

import torch

ENGINE_MODES = ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")


def _nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    from trl.trainer.utils import nanstd

    return nanstd(x) if dim is None else nanstd(x, dim=dim)


def group_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int,
                     scale_rewards: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards with NaN for unscorable rows, advantages, zero-std flag per group), TRL 1.16's formula.

    A row is unscorable when every reward function returned None (NaN): it does not enter its
    group's baseline or spread, and its advantage is 0.
    """
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations, dim=0)
    if scale_rewards in ("group", "none"):
        std = _nanstd(grouped, dim=1).repeat_interleave(num_generations, dim=0)
    elif scale_rewards == "batch":
        std = _nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    advantages = torch.nan_to_num(advantages, nan=0.0)
    group_std = _nanstd(grouped, dim=1)
    zero_std = torch.isclose(torch.nan_to_num(group_std, nan=0.0), torch.zeros_like(group_std))
    return rewards, advantages, zero_std


def engine_ratio(old_logps: torch.Tensor, sampling_logps: torch.Tensor | None, mask: torch.Tensor, mode: str,
                 low: float | None, high: float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """pi_trainer / pi_engine for each turn (sequence_*: shape (B, 1)) or token ((B, T)), and its statistics.

    `sampling_logps` None means the trainer generated the tokens itself (transformers): the ratio is 1.
    Statistics are over real rows (sequence modes) or their loss tokens (token modes): the raw ratio's
    min/mean/max before bounds, how many were masked (set to 0) or capped (clamped), the mean/max
    |log pi_trainer - log pi_engine| per token, and how many tokens had no engine log-prob (NaN, ratio 1).
    """
    if mode not in ENGINE_MODES:
        raise ValueError(f"engine correction mode must be one of {ENGINE_MODES}, got {mode!r}")
    mask = mask.float()
    sequence = mode.startswith("sequence")
    real = mask.sum(dim=1) > 0
    if sampling_logps is None:
        diff = torch.zeros_like(old_logps)
        missing = 0
    else:
        raw = old_logps - sampling_logps
        missing = int((torch.isnan(raw) & mask.bool()).sum())
        diff = torch.nan_to_num(raw * mask, nan=0.0)
    log_ratio = diff.sum(dim=-1, keepdim=True) if sequence else diff
    ratio = torch.exp(log_ratio)
    units = real.unsqueeze(1) if sequence else mask.bool()  # which entries are real turns / loss tokens
    values = ratio[units]
    lo = low if low is not None else -math.inf
    hi = high if high is not None else math.inf
    outside = ((ratio < lo) | (ratio > hi)) & units
    if mode.endswith("truncate"):
        bounded = torch.clamp(ratio, min=low, max=high)
    else:
        bounded = ratio.masked_fill(outside, 0.0)
    n = max(1, int(units.sum()))
    token_diff = diff.abs()[mask.bool()]
    stats = {
        "engine_ratio_min": float(values.min()) if values.numel() else 1.0,
        "engine_ratio_mean": float(values.mean()) if values.numel() else 1.0,
        "engine_ratio_max": float(values.max()) if values.numel() else 1.0,
        "engine_masked": int(outside.sum()) if mode.endswith("mask") else 0,
        "engine_capped": int(outside.sum()) if mode.endswith("truncate") else 0,
        "engine_units": int(units.sum()),
        "engine_logp_diff_mean": float(token_diff.mean()) if token_diff.numel() else 0.0,
        "engine_logp_diff_max": float(token_diff.max()) if token_diff.numel() else 0.0,
        "engine_logp_missing": missing,
    }
    stats["engine_masked_frac"] = stats["engine_masked"] / n
    stats["engine_capped_frac"] = stats["engine_capped"] / n
    return bounded, stats


def fold_engine_ratio(advantages: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """Per-token (or per-turn) advantages A * w: TRL's ratio-weighted loss for every generation backend."""
    return advantages.unsqueeze(1) * ratio if advantages.dim() == 1 else advantages * ratio


def real_rows(batch: dict[str, Any]) -> torch.Tensor:
    """Rows with at least one loss token (filler rows have none)."""
    return batch["completion_mask"].sum(dim=1) > 0


def carries_gradient(advantages: torch.Tensor, completion_mask: torch.Tensor, *, beta: float,
                     entropy_bonus: bool) -> bool:
    """Whether a mini-batch's loss can have a non-zero gradient.

    Without a KL term (beta 0) and an entropy bonus, every loss type is a sum of advantage x (a
    function of the policy ratio) over loss tokens: when every loss token's advantage is 0 (groups
    whose rewards were all equal, filler rows), the gradient is exactly 0. Stepping AdamW on it is
    not a no-op: its momentum keeps moving every weight (by about lr x m/sqrt(v), for ~1/(1-beta1)
    updates), a drift with no signal behind it.
    """
    if beta != 0.0 or entropy_bonus:
        return True
    mask = completion_mask.bool()
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(1).expand_as(mask)
    return bool((adv[mask] != 0).any())
