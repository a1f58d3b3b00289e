"""History-aware training samples: one per model turn, loss on that turn's tokens only.

A T-turn rollout becomes T samples. Sample t is the prompt the policy saw at turn t (system
prompt + task + the first list_tools exchange + the last w exchanges, rendered by the chat
template with the two meta-tools) and the tokens it generated there; the prompt is context only,
so the loss mask covers the target turn and nothing else. The prompt tokens are the ones used for
generation (recorded, not re-rendered), so training is on-policy for the truncated context.
With `history: full` the same holds with the whole conversation as context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from awm_rl.agent.episode import Episode
from awm_rl.agent.loop import window_messages
from awm_rl.agent.qwen3 import META_TOOLS


@dataclass
class TurnTokens:
    """What the policy saw and produced in one turn (EOS included when the turn finished)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logprobs: list[float] | None = None


@dataclass
class TurnSample:
    """One training row: context -> target turn, with its trajectory's reward and advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    reward: float
    scenario: str
    task_idx: int
    rollout: int
    turn: int
    sampling_logprobs: list[float] | None = None
    padding: bool = False  # filler row (no loss) to make the row count divide into mini-batches

    def describe(self, tokenizer: Any) -> dict[str, Any]:
        """A JSON-able record (decoded text) for inspection and tests."""
        return {"scenario": self.scenario, "task_idx": self.task_idx, "rollout": self.rollout, "turn": self.turn,
                "reward": self.reward, "advantage": self.advantage, "padding": self.padding,
                "prompt_tokens": len(self.prompt_ids), "loss_tokens": 0 if self.padding else len(self.completion_ids),
                "prompt_text": tokenizer.decode(self.prompt_ids, skip_special_tokens=False),
                "completion_text": tokenizer.decode(self.completion_ids, skip_special_tokens=False)}


def render_prompt_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The token ids of a turn's prompt: the chat template with the meta-tools and a generation prompt.

    The one place prompts are rendered (rollouts, warm start, tests), so all agree token for token.
    """
    text = tokenizer.apply_chat_template(messages, tools=META_TOOLS, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def turn_context(messages: list[dict[str, Any]], turn: int, window: int | None) -> list[dict[str, Any]]:
    """The (windowed) conversation the policy saw before turn `turn` of a recorded episode."""
    return window_messages(messages[:2 + 2 * turn], window)


def samples_from_rollout(episode: Episode, turns: list[TurnTokens], *, reward: float, advantage: float,
                         rollout: int) -> list[TurnSample]:
    """One sample per model turn of `episode` (format-error turns included: they carry the -1)."""
    if len(turns) != len(episode.steps):
        raise ValueError(f"rollout {rollout} ({episode.scenario}/t{episode.task_idx}): {len(episode.steps)} steps but "
                         f"{len(turns)} recorded generations; the policy and the loop disagree")
    return [TurnSample(prompt_ids=t.prompt_ids, completion_ids=t.completion_ids, advantage=advantage, reward=reward,
                       scenario=episode.scenario, task_idx=episode.task_idx, rollout=rollout, turn=i,
                       sampling_logprobs=t.sampling_logprobs)
            for i, t in enumerate(turns) if t.completion_ids]


def pad_samples(samples: list[TurnSample], multiple: int, minimum: int = 0) -> list[TurnSample]:
    """Append loss-free filler rows so the count is >= `minimum` and a multiple of `multiple`.

    TRL splits a generation batch into equal mini-batches and silently drops a remainder.
    """
    if not samples:
        raise ValueError("no samples to pad: every rollout ended before its first turn")
    target = max(len(samples), minimum)
    target += (-target) % multiple
    filler = min(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))  # cheapest row to run
    extra = [TurnSample(prompt_ids=filler.prompt_ids, completion_ids=filler.completion_ids, advantage=0.0, reward=0.0,
                        scenario=filler.scenario, task_idx=filler.task_idx, rollout=-1, turn=-1, padding=True)
             for _ in range(target - len(samples))]
    return samples + extra


def collate(samples: list[TurnSample], pad_token_id: int, device: Any = None) -> dict[str, Any]:
    """prompt_ids/prompt_mask (left-padded), completion_ids/completion_mask (right-padded), advantages,
    and sampling_per_token_logps when every sample has them. Filler rows get an all-zero completion mask."""
    import torch

    n = len(samples)
    p_len = max(len(s.prompt_ids) for s in samples)
    c_len = max(len(s.completion_ids) for s in samples)
    prompt_ids = torch.full((n, p_len), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_len), dtype=torch.long)
    completion_ids = torch.full((n, c_len), pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros((n, c_len), dtype=torch.long)
    with_logps = all(s.sampling_logprobs is not None or s.padding for s in samples) and any(
        s.sampling_logprobs is not None for s in samples)
    sampling = torch.zeros((n, c_len), dtype=torch.float32) if with_logps else None
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        prompt_ids[i, p_len - p:] = torch.tensor(s.prompt_ids, dtype=torch.long)
        prompt_mask[i, p_len - p:] = 1
        completion_ids[i, :c] = torch.tensor(s.completion_ids, dtype=torch.long)
        if not s.padding:
            completion_mask[i, :c] = 1
            if sampling is not None and s.sampling_logprobs is not None:
                values = [float("nan") if v is None else float(v) for v in s.sampling_logprobs[:c]]
                sampling[i, :len(values)] = torch.tensor(values, dtype=torch.float32)
    out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
           "completion_mask": completion_mask,
           "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32)}
    if sampling is not None:
        out["sampling_per_token_logps"] = sampling
    if device is not None:
        out = {k: v.to(device) for k, v in out.items()}
    return out


ROW_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "old_per_token_logps",
            "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio")


def take_rows(batch: dict[str, Any], rows: Any) -> dict[str, Any]:
    """The rows `rows` (a slice or an index tensor) of a collated batch; scalars are kept as they are."""
    return {k: (v[rows] if k in ROW_KEYS and v is not None and getattr(v, "ndim", 0) > 0 else v)
            for k, v in batch.items()}


def length_chunks(batch: dict[str, Any], size: int) -> list[Any]:
    """Index tensors of at most `size` rows, grouping rows of similar length (little padding per chunk,
    so attention runs without a padding mask where it can)."""
    import torch

    lengths = batch["prompt_mask"].sum(dim=1) + batch["completion_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    return [order[i:i + size] for i in range(0, order.numel(), size)]


def trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop prompt columns no row attends to (left) and completion columns past every row's end (right)."""
    prompt_mask, completion_mask = batch["prompt_mask"], batch["completion_mask"]
    used_p = prompt_mask.any(dim=0).nonzero()
    first = int(used_p[0]) if len(used_p) else prompt_mask.size(1) - 1
    used_c = completion_mask.any(dim=0).nonzero()
    last = int(used_c[-1]) + 1 if len(used_c) else 1
    out = dict(batch)
    for key in ("prompt_ids", "prompt_mask"):
        out[key] = batch[key][:, first:]
    for key in ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
                "sampling_per_token_logps"):
        if batch.get(key) is not None:
            out[key] = batch[key][:, :last]
    for key in ("importance_sampling_ratio", "advantages"):  # per-token when the engine correction is per token
        value = batch.get(key)
        if value is not None and value.dim() == 2 and value.size(1) > 1:
            out[key] = value[:, :last]
    return out
