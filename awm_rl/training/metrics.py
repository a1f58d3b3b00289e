"""Per-step metrics of a GRPO run: rollout statistics, the metrics file, and the curves plot.

Every RL step appends one JSON line to `metrics.jsonl`: reward mean/std, completion rate
(Completed), partial rate, format-error ratio, environment-error ratio, agent-error ratio, the
policy-failure ratio (context overflow, failed generation: left out of rewards and advantages),
turns, rollout seconds split into generation / environment calls / waiting, judge / train / step
seconds, tokens, samples, the engine correction's ratio statistics (min/mean/max, masked and
capped fractions), the policy ratio's min/mean/max, and the optimiser's numbers (loss, KL,
entropy, clip ratios, grad norm, learning rate), plus the checkpoint written at that step.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awm_rl.agent.episode import Episode, EpisodeScore

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
CURVES_FILE = "curves.png"
# Optimiser numbers copied from TRL's per-update logs into the step record (averaged over updates).
TRAIN_KEYS = ("loss", "grad_norm", "learning_rate", "kl", "entropy", "clip_ratio/region_mean", "clip_ratio/high_mean",
              "clip_ratio/low_mean", "policy_loss", "step_time", "policy_ratio/min", "policy_ratio/mean",
              "policy_ratio/max", "policy_ratio/outside_clip_frac")
# Time split of a step (seconds) in the order the summary and `awm train` print it.
TIME_KEYS = ("generation_s", "env_s", "waiting_s", "judge_s", "logps_s", "train_s")


def aggregate(key: str, values: list[float]) -> float:
    """One number per step from an RL step's updates: min of minima, max of maxima, else the mean."""
    if key.endswith("/min"):
        return min(values)
    if key.endswith("/max"):
        return max(values)
    return sum(values) / len(values)


def is_policy_failure(episode: Episode) -> bool:
    """The policy side failed (context overflow, a generation request that failed even alone): the
    episode says nothing about the policy's behaviour, so it gets no reward and no advantage."""
    return episode.termination == "policy_error"


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0


def rollout_metrics(episodes: list[Episode], scores: list[EpisodeScore]) -> dict[str, float]:
    """Outcome ratios, reward and turn statistics of one step's episodes.

    Policy-side failures are their own ratio (`policy_failure_ratio`), not environment errors, and
    stay out of the reward statistics (they are not scored)."""
    n = len(scores)
    failed = [is_policy_failure(e) for e in episodes]
    rewards = [s.reward for s, bad in zip(scores, failed, strict=True) if not bad]
    mean = _mean(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0

    def ratio(outcome: str) -> float:
        hits = sum(s.outcome == outcome and not bad for s, bad in zip(scores, failed, strict=True))
        return round(hits / n, 6) if n else 0.0

    return {
        "episodes": n, "scored": len(rewards), "reward_mean": mean, "reward_std": round(std, 6),
        "completion_rate": ratio("completed"), "partial_rate": ratio("partially_completed"),
        "format_error_ratio": ratio("format_error"), "environment_error_ratio": ratio("environment_error"),
        "agent_error_ratio": ratio("agent_error"),
        "policy_failure_ratio": round(sum(failed) / n, 6) if n else 0.0, "policy_failures": sum(failed),
        "context_overflows": sum(bool(bad and "context overflow" in (e.termination_detail or ""))
                                 for e, bad in zip(episodes, failed, strict=True)),
        "turns_mean": _mean([e.turns for e in episodes]), "tool_calls_mean": _mean([e.tool_calls for e in episodes]),
        "prompt_tokens": sum(s.prompt_tokens for e in episodes for s in e.steps),
        "completion_tokens": sum(s.completion_tokens for e in episodes for s in e.steps),
        "judge_cost_usd": round(sum(s.judge.cost_usd for s in scores if s.judge), 6),
    }


_SUMMED = ("episodes", "policy_failures", "context_overflows", "prompt_tokens", "completion_tokens", "judge_cost_usd",
           "scored")
_PER_EPISODE = ("completion_rate", "partial_rate", "format_error_ratio", "environment_error_ratio", "agent_error_ratio",
                "policy_failure_ratio", "turns_mean", "tool_calls_mean")


def merge_rollout_metrics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One step's rollout metrics from the data-parallel processes' shares (counts summed, ratios and means
    weighted by episodes, the reward's mean and std pooled over the scored episodes)."""
    out = dict(parts[0])
    episodes = sum(p["episodes"] for p in parts) or 1
    for key in _SUMMED:
        out[key] = sum(p.get(key, 0) for p in parts)
    for key in _PER_EPISODE:
        out[key] = round(sum(p[key] * p["episodes"] for p in parts) / episodes, 6)
    scored = sum(p["scored"] for p in parts)
    if scored:
        mean = sum(p["reward_mean"] * p["scored"] for p in parts) / scored
        second = sum((p["reward_std"] ** 2 + p["reward_mean"] ** 2) * p["scored"] for p in parts) / scored
        out["reward_mean"], out["reward_std"] = round(mean, 6), round(math.sqrt(max(0.0, second - mean ** 2)), 6)
    out["judge_cost_usd"] = round(out["judge_cost_usd"], 6)
    return out


def time_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per step (means over the steps) by phase, and each phase's share of a step."""
    if not records:
        return {}
    steps = len(records)
    step_s = sum(float(r.get("step_s", 0.0)) for r in records) / steps
    out: dict[str, Any] = {"step_s": round(step_s, 3)}
    for key in TIME_KEYS + ("env_busy_s",):
        out[key] = round(sum(float(r.get(key, 0.0)) for r in records) / steps, 3)
    out["env_share"] = round(out["env_s"] / step_s, 4) if step_s > 0 else 0.0
    out["env_busy_share"] = round(out["env_busy_s"] / step_s, 4) if step_s > 0 else 0.0
    out["generation_share"] = round(out["generation_s"] / step_s, 4) if step_s > 0 else 0.0
    return out


def format_time_split(t: dict[str, Any]) -> str:
    """The summary line: where a step's time goes, the environments' share first."""
    if not t:
        return "time split: no step recorded"
    step = t["step_s"] or 1.0
    parts = [f"{label} {t[key]:.2f}s ({t[key] / step:.0%})" for key, label in
             (("generation_s", "generation"), ("env_s", "environment calls"), ("waiting_s", "waiting"),
              ("judge_s", "judging"), ("logps_s", "log-probs"), ("train_s", "training"))]
    return (f"environments take {t['env_share']:.1%} of a step ({t['env_s']:.2f}s of {t['step_s']:.2f}s; calls in "
            f"flight {t['env_busy_share']:.1%} of it, overlapping generation included); per step: " + ", ".join(parts))


class MetricsWriter:
    """Appends step records to `metrics.jsonl` (one line each, flushed) and keeps them for the plot."""

    def __init__(self, out_dir: Path, on_event: Callable[[dict[str, Any]], None] | None = None, *,
                 tensorboard: bool = False) -> None:
        self.path = Path(out_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")
        self.records: list[dict[str, Any]] = []
        self.on_event = on_event
        self._lock = threading.Lock()
        self._tb = None
        if tensorboard:  # next to TRL's own event files (report_to), one folder per run
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(out_dir) / TENSORBOARD_DIR))

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, ensure_ascii=False, default=float) + "\n")
                fh.flush()
            if self._tb is not None:
                for key, value in record.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step", "steps"):
                        self._tb.add_scalar(f"awm/{key}", value, global_step=int(record["step"]))
                self._tb.flush()
        if self.on_event:
            self.on_event({"kind": "step", "message": format_step(record), "record": record})


    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def format_step(r: dict[str, Any]) -> str:
    return (f"step {r['step']}/{r.get('steps', '?')}: reward {r['reward_mean']:+.3f} (std {r['reward_std']:.3f}), "
            f"completed {r['completion_rate']:.0%}, format errors {r['format_error_ratio']:.0%}, "
            f"env errors {r['environment_error_ratio']:.0%}, policy failures {r.get('policy_failure_ratio', 0):.0%}, turns {r['turns_mean']:.1f}, loss {r.get('loss', 0):.4g}, "
            f"rollout {r['rollout_s']:.1f}s (generation {r.get('generation_s', 0):.1f}s, environments "
            f"{r.get('env_s', 0):.1f}s), step {r['step_s']:.1f}s")


def read_metrics(out_dir: Path) -> list[dict[str, Any]]:
    path = Path(out_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_curves(records: list[dict[str, Any]], path: Path) -> Path:
    """Reward mean (with std band) and completion / format-error / environment-error rates per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    mean = [r["reward_mean"] for r in records]
    std = [r["reward_std"] for r in records]
    ax1.plot(steps, mean, marker="o", color="#4c72b0", label="reward mean")
    band = list(zip(mean, std, strict=True))
    ax1.fill_between(steps, [m - s for m, s in band], [m + s for m, s in band], alpha=0.2, color="#4c72b0")
    ax1.set_xlabel("step")
    ax1.set_ylabel("reward")
    ax1.set_ylim(-1.05, 1.05)
    ax1.set_title("Reward")
    for key, label, color in (("completion_rate", "completed", "#55a868"), ("format_error_ratio", "format error", "#c44e52"),
                              ("environment_error_ratio", "environment error", "#8172b2")):
        ax2.plot(steps, [r[key] for r in records], marker="o", label=label, color=color)
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("step")
    ax2.set_title("Completion and error rates")
    ax2.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if steps:
            ax.set_xticks(steps if len(steps) <= 12 else steps[:: max(1, len(steps) // 12)])
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
