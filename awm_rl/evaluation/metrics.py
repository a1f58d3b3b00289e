"""The numbers an evaluation reports for a group of scored episodes (an environment, a category, the whole run).

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"):
per task with n attempts of which c completed, 1 - C(n-c, k) / C(n, k), averaged over the tasks; pass@1 is the
mean completion rate per task. A task with fewer than k attempts (a run still going) counts in pass@1 only.
Each failed episode has one reason (`failure_reason`), the rule that ended it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb
from typing import Any

from awm_rl.agent.episode import Episode, EpisodeScore

# Why an episode failed, from its termination and the judge's verdict (see `failure_reason`).
FAILURE_REASONS = {
    "format:<rule>": "a rule of the tool-call format broken (awm_rl.agent.validator; the rule named)",
    "environment_error": "the environment failed (5xx, crash, timeout, no instance)",
    "policy_error": "the policy produced no turn (transport failure after retries, ...)",
    "max_turns": "no final answer within the turn limit",
    "incomplete": "a final answer, the verifier says the task is not complete",
    "partial": "a final answer, the judge says partially complete",
    "verifier_error": "a final answer, the verifier could not run or crashed",
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k attempts drawn from n (c of them completed) completed."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def failure_reason(episode: Episode, score: EpisodeScore) -> str | None:
    """None for a completed episode, else the rule that failed it (a key of `FAILURE_REASONS`)."""
    if score.outcome == "completed":
        return None
    if episode.termination == "format_error":
        return f"format:{episode.format_rule or 'unknown'}"
    if episode.termination in ("environment_error", "policy_error"):
        return episode.termination
    if episode.termination == "max_turns":
        return "max_turns"
    return {"agent_error": "incomplete", "partially_completed": "partial"}.get(score.outcome, "verifier_error")


def group_stats(items: list[tuple[Episode, EpisodeScore]], k: int) -> dict[str, Any]:
    """Episodes, tasks, pass@1 and pass@k, rates, turns, tokens, cost and failure reasons of one group."""
    scores = [s for _, s in items]
    n = len(items)
    per_task: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for episode, score in items:
        per_task[(episode.scenario, episode.task_idx)].append(score.outcome == "completed")
    full = [v for v in per_task.values() if len(v) >= k]
    prompt = sum(st.prompt_tokens for e, _ in items for st in e.steps)
    completion = sum(st.completion_tokens for e, _ in items for st in e.steps)
    policy_cost = sum(st.cost_usd for e, _ in items for st in e.steps)
    judge_tokens = sum(s.judge.prompt_tokens + s.judge.completion_tokens for s in scores if s.judge)
    judge_cost = sum(s.judge.cost_usd for s in scores if s.judge)
    reasons = Counter(r for e, s in items if (r := failure_reason(e, s)) is not None)

    def rate(outcome: str) -> float:
        return round(sum(s.outcome == outcome for s in scores) / n, 4) if n else 0.0

    return {
        "episodes": n, "tasks": len(per_task),
        "pass_at_1": round(sum(sum(v) / len(v) for v in per_task.values()) / len(per_task), 4) if per_task else 0.0,
        "pass_at_k": round(sum(pass_at_k(len(v), sum(v), k) for v in full) / len(full), 4) if full else None,
        "pass_rate": rate("completed"),
        "mean_reward": round(sum(s.reward for s in scores) / n, 4) if n else 0.0,
        "format_error_rate": rate("format_error"), "environment_error_rate": rate("environment_error"),
        "mean_turns": round(sum(e.turns for e, _ in items) / n, 3) if n else 0.0,
        "prompt_tokens": prompt, "completion_tokens": completion,
        "mean_tokens": round((prompt + completion) / n, 1) if n else 0.0,
        "policy_cost_usd": round(policy_cost, 6), "judge_tokens": judge_tokens, "judge_cost_usd": round(judge_cost, 6),
        "cost_usd": round(policy_cost + judge_cost, 6),
        "failure_reasons": dict(reasons.most_common()),
    }
