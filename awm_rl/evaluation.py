"""Evaluate a policy over the environment catalog: pass rates, error rates, stored trajectories.

`evaluate()` picks up to `tasks_per_env` eligible tasks per ready environment (skipping tasks the
quality gate left out: see awm_rl.quality), runs the episodes concurrently against the runtime pool,
judges them (batched) and writes, under `out_dir`: one JSON per episode (trajectory + score),
`report.json`, `pass_rate_by_bucket.png` and `task_difficulty.png`. Difficulty buckets are the number of tool calls
an episode used (`BUCKETS`). Every episode is also added to the store's per-task difficulty records
(awm_resources.difficulty: by policy and run); the report's `per_task` table gives each task's outcome here and
the policy's pass rate and pass-rate bucket over every run recorded.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_resources.difficulty import (
    bucket_counts,
    bucket_rank,
    load_difficulty,
    new_run_id,
    record_rollouts,
    with_untried,
)
from awm_resources.provenance import run_provenance
from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.agent import Episode, EpisodeScore, EpisodeSpec, LoopConfig, Policy, run_episodes
from awm_rl.agent.loop import ToolEnvironments, discard_snapshot
from awm_rl.reward import Judge, TaskRecord, load_tasks, score_episodes

BUCKETS: list[tuple[str, int, int]] = [("0-2 calls", 0, 2), ("3-5 calls", 3, 5), ("6-9 calls", 6, 9), ("10+ calls", 10, 10**9)]


def bucket_of(tool_calls: int) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= tool_calls <= hi)


def catalog_scenarios(store: ArtifactStore) -> list[str]:
    """Ready environments from `catalog.json` (the catalog asset's output), else every scenario with
    environment code, tasks and verifiers."""
    catalog = store.catalog()
    if catalog is not None:
        return sorted(e.name for e in catalog.ready())
    return [s for s in store.list_scenarios()
            if all(store.has(s, f) for f in ("server.py", "initial.db", "tasks.json", "verifiers.json"))]


@dataclass
class EvaluationReport:
    """Aggregate numbers of one evaluation run (see `summary()`), plus where files went."""

    episodes: int
    pass_rate: float
    mean_reward: float
    format_error_rate: float
    environment_error_rate: float
    mean_turns: float
    per_environment: dict[str, dict[str, Any]]
    per_bucket: dict[str, dict[str, Any]]
    excluded_tasks: dict[str, list[int]]
    judge_tokens: int
    judge_cost_usd: float
    wall_s: float
    out_dir: str
    plot: str | None = None
    episode_files: list[str] = field(default_factory=list)
    # Provenance (awm_resources.provenance.run_provenance): the catalog read, each environment's version.
    catalog_digest: str | None = None
    environments: dict[str, str | None] = field(default_factory=dict)
    changed_since_catalog: list[str] = field(default_factory=list)

    # Per-task difficulty (awm_resources.difficulty): this run's records, each task's row, tasks per bucket.
    difficulty_run: str | None = None
    per_task: list[dict[str, Any]] = field(default_factory=list)
    difficulty_buckets: dict[str, int] = field(default_factory=dict)
    difficulty_plot: str | None = None

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "episode_files"}


def select_tasks(store: ArtifactStore, scenarios: list[str], tasks_per_env: int,
                 excluded: dict[str, list[int]]) -> list[TaskRecord]:
    chosen: list[TaskRecord] = []
    for scenario in scenarios:
        skip = set(excluded.get(scenario, []))
        records = [r for r in load_tasks(store, scenario) if r.task_idx not in skip and r.verifiers]
        chosen.extend(records[:tasks_per_env])
    return chosen


def required_calls(store: ArtifactStore, scenarios: list[str]) -> dict[tuple[str, int], int]:
    """(scenario, task_idx) -> tool calls of the task's reference solution, where it has one."""
    from awm_rl.quality.solutions import load_solutions

    out = {}
    for scenario in scenarios:
        entries = [v for r in load_tasks(store, scenario) for v in r.verifiers]
        out.update({(scenario, i): len(s.calls) for i, s in load_solutions(store.scenario_dir(scenario), entries).items()})
    return out


def _rate(scores: list[EpisodeScore], outcome: str) -> float:
    return round(sum(s.outcome == outcome for s in scores) / len(scores), 4) if scores else 0.0


def _group(pairs: list[tuple[Episode, EpisodeScore]]) -> dict[str, Any]:
    scores = [s for _, s in pairs]
    return {"episodes": len(pairs), "pass_rate": _rate(scores, "completed"),
            "mean_reward": round(sum(s.reward for s in scores) / len(scores), 4) if scores else 0.0,
            "format_error_rate": _rate(scores, "format_error"),
            "environment_error_rate": _rate(scores, "environment_error"),
            "mean_turns": round(sum(e.turns for e, _ in pairs) / len(pairs), 3) if pairs else 0.0}


def outcome_rows(episodes: list[Episode], scores: list[EpisodeScore],
                 failed: list[bool] | None = None) -> list[tuple[str, int, str, int]]:
    """(scenario, task_idx, outcome, turns) of each episode, for the per-task difficulty records
    (awm_resources.difficulty): a policy-side failure (`failed`, by default a `policy_error` termination) is its
    own outcome there, not an attempt."""
    bad = failed if failed is not None else [e.termination == "policy_error" for e in episodes]
    return [(e.scenario, e.task_idx, "policy_failure" if f else s.outcome, e.turns)
            for e, s, f in zip(episodes, scores, bad, strict=True)]


def evaluate(store: ArtifactStore, pool: ToolEnvironments, policy: Policy, judge: Judge, *, out_dir: Path,
             tasks_per_env: int = 3, window: int | None = 10, max_turns: int = 20,
             scenarios: list[str] | None = None, concurrency: int = 4,
             excluded: dict[str, list[int]] | None = None, keep_databases: bool = False,
             run_id: str | None = None) -> EvaluationReport:
    """Run and judge the episodes; write trajectories, report and plots to `out_dir`; add every episode to the
    store's per-task difficulty records as run `run_id` (default: a new id)."""
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scenarios = catalog_scenarios(store) if scenarios is None else scenarios
    if excluded is None:
        from awm_rl.quality.report import ineligible_tasks

        excluded = ineligible_tasks(store, scenarios)
    records = select_tasks(store, scenarios, tasks_per_env, excluded)
    catalog = store.catalog()
    provenance = run_provenance(store, sorted({r.scenario for r in records}), catalog.ready() if catalog else None)
    specs = [EpisodeSpec(r.scenario, r.task_idx, r.task) for r in records]
    config = LoopConfig(max_turns=max_turns, window=window, snapshot_dir=out_dir / "databases")
    episodes = run_episodes(pool, policy, specs, config, concurrency=concurrency)
    scores = score_episodes(episodes, records, judge)
    difficulty_run = run_id or new_run_id("evaluation")
    record_rollouts(store, run=difficulty_run, source="evaluation", policy=policy.name, part="episodes",
                    rows=outcome_rows(episodes, scores))
    files = []
    for episode, score in zip(episodes, scores, strict=True):
        if not keep_databases:
            discard_snapshot(episode)
        path = out_dir / "episodes" / f"{episode.scenario}.t{episode.task_idx}.json"
        atomic_write_json(path, {"episode": json.loads(episode.model_dump_json()), "score": json.loads(score.model_dump_json())})
        files.append(str(path))
    pairs = list(zip(episodes, scores, strict=True))
    by_env: dict[str, list] = {}
    by_bucket: dict[str, list] = {name: [] for name, _, _ in BUCKETS}
    required = required_calls(store, sorted({r.scenario for r in records}))
    for episode, score in pairs:
        by_env.setdefault(episode.scenario, []).append((episode, score))
        # Difficulty is what the task requires (its reference solution), not what the agent happened to do.
        need = required.get((episode.scenario, episode.task_idx))
        by_bucket[bucket_of(episode.tool_calls if need is None else need)].append((episode, score))
    overall = _group(pairs)
    report = EvaluationReport(
        episodes=len(pairs), pass_rate=overall["pass_rate"], mean_reward=overall["mean_reward"],
        format_error_rate=overall["format_error_rate"], environment_error_rate=overall["environment_error_rate"],
        mean_turns=overall["mean_turns"], per_environment={k: _group(v) for k, v in sorted(by_env.items())},
        per_bucket={k: _group(v) for k, v in by_bucket.items()}, excluded_tasks=excluded,
        judge_tokens=sum((s.judge.prompt_tokens + s.judge.completion_tokens) if s.judge else 0 for s in scores),
        judge_cost_usd=round(sum(s.judge.cost_usd if s.judge else 0.0 for s in scores), 6),
        wall_s=round(time.perf_counter() - started, 2), out_dir=str(out_dir), episode_files=files, **provenance,
    )
    report.plot = str(plot_pass_rate_by_bucket(report, out_dir / "pass_rate_by_bucket.png"))
    report.difficulty_run = difficulty_run
    report.per_task, report.difficulty_buckets = per_task_difficulty(store, policy.name, pairs)
    report.difficulty_plot = str(plot_task_difficulty(report, out_dir / "task_difficulty.png"))
    atomic_write_json(out_dir / "report.json", {**report.summary(), "policy": policy.name, "judge_mode": judge.mode,
                                                "window": window, "tasks_per_env": tasks_per_env})
    return report


def per_task_difficulty(store: ArtifactStore, policy: str,
                        pairs: list[tuple[Episode, EpisodeScore]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per evaluated task: its outcome in this run and the policy's record over every run in the store (attempts,
    pass rate, bucket); hardest first. And the evaluated tasks per bucket."""
    merged = load_difficulty(store).tasks(policy=policy)
    here = {(e.scenario, e.task_idx): (e, s) for e, s in pairs}
    tasks = with_untried(merged, list(here))
    rows = []
    for task in tasks:
        episode, score = here[(task.scenario, task.task_idx)]
        row = task.row()
        rows.append({"scenario": task.scenario, "task": task.task_idx, "outcome": score.outcome, "reward": score.reward,
                     "turns": episode.turns, "tool_calls": episode.tool_calls, "attempts": row["attempts"],
                     "pass_rate": row["pass_rate"], "bucket": row["bucket"], "mean_turns": row["mean_turns"]})
    rows.sort(key=lambda r: (bucket_rank(r["bucket"]), r["pass_rate"] or 0.0, r["scenario"], r["task"]))
    return rows, bucket_counts(tasks)


def plot_task_difficulty(report: EvaluationReport, path: Path) -> Path:
    """Two panels: evaluated tasks per difficulty bucket, and each task's pass rate (the policy's, over every
    recorded run) from the hardest to the easiest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from awm_resources.difficulty import BUCKETS

    colors = {"untried": "#bbbbbb", "unsolved": "#c44e52", "hard": "#dd8452", "medium": "#4c72b0", "easy": "#55a868"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    names = list(BUCKETS)
    counts = [report.difficulty_buckets.get(n, 0) for n in names]
    ax1.bar(names, counts, color=[colors[n] for n in names])
    ax1.set_ylabel("tasks")
    ax1.set_title("Tasks per difficulty bucket")
    rows = sorted(report.per_task, key=lambda r: (r["pass_rate"] is None, r["pass_rate"] or 0.0))
    rates = [r["pass_rate"] or 0.0 for r in rows]
    ax2.bar(range(len(rows)), rates, width=1.0, color=[colors.get(r["bucket"], "#bbbbbb") for r in rows])
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("task (hardest first)")
    ax2.set_ylabel("pass rate (all recorded runs)")
    ax2.set_title(f"Per-task pass rate ({len(rows)} tasks)")
    for axis in (ax1.yaxis, ax2.xaxis):  # counts and task ranks are whole numbers
        axis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_pass_rate_by_bucket(report: EvaluationReport, path: Path) -> Path:
    """A bar chart of pass rate per difficulty bucket (episode counts on the bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report.per_bucket)
    rates = [report.per_bucket[n]["pass_rate"] for n in names]
    counts = [report.per_bucket[n]["episodes"] for n in names]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    bars = ax.bar(names, rates, color="#4c72b0")
    for bar, n in zip(bars, counts, strict=True):
        ax.annotate(f"n={n}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass rate")
    ax.set_xlabel("tool calls the task requires (reference solution; else the calls made)")
    ax.set_title(f"Pass rate by difficulty (overall {report.pass_rate:.0%}, {report.episodes} episodes)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
