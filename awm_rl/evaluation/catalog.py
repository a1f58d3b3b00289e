"""Evaluate a policy over the environment catalog: pass@1 and pass@k, failure reasons, cost, stored trajectories.

`evaluate()` picks the eligible tasks of every ready environment (skipping tasks the quality gate left out: see
awm_rl.quality), all of them or `tasks_per_env` per environment (the first ones, or a seeded sample), and runs
`k` attempts of each concurrently against the runtime pool, with at most `max_requests` turns being generated at
once (`RequestLimit`). Each episode is judged and written as it finishes (`episodes/<scenario>.t<task>.a<attempt>.json`:
trajectory + score), so a run folder is resumable: evaluating into it again (the same plan, checked against its
`run.json`) runs only the episodes not on disk and recomputes the report from every episode there. A policy
configuration error (`PolicyConfigError`: no key, unknown model or endpoint) stops the run at once, what finished
kept. Written under `out_dir`: `report.json` (awm_rl.evaluation.metrics: per environment, per category and overall),
`pass_rate_by_bucket.png` and `task_difficulty.png`. Difficulty buckets are the number of tool calls a task's
reference solution makes (`BUCKETS`). Every episode is also added, once, to the store's per-task difficulty
records (awm_resources.difficulty: by policy and run; `difficulty_parts.json` says which part holds which
episode); the report's `per_task` table gives each task's outcomes here and the policy's pass rate and
pass-rate bucket over every run recorded.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
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
from awm_rl.agent import (
    Episode,
    EpisodeScore,
    EpisodeSpec,
    LoopConfig,
    Policy,
    PolicyOutput,
    PolicyRequest,
    run_episode,
)
from awm_rl.agent.loop import ToolEnvironments, discard_snapshot
from awm_rl.evaluation.metrics import group_stats
from awm_rl.reward import Judge, TaskRecord, load_tasks, score_episodes

BUCKETS: list[tuple[str, int, int]] = [("0-2 calls", 0, 2), ("3-5 calls", 3, 5), ("6-9 calls", 6, 9), ("10+ calls", 10, 10**9)]
RUN_FILE = "run.json"
LEDGER_FILE = "difficulty_parts.json"
# What fixes the episodes of a run folder: a resume with any of these changed would mix two evaluations.
PLAN_KEYS = ("policy", "reasoning", "tool_calling", "judge_mode", "tasks_per_env", "k", "seed", "window", "max_turns")


class EvaluationRunError(ValueError):
    """A run folder that cannot be evaluated into: another plan's run, an unreadable episode file."""


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


def scenario_categories(store: ArtifactStore, scenarios: list[str]) -> dict[str, str]:
    """scenario -> its category: the catalog entry's, else scenario.json's, else "other"."""
    catalog = store.catalog()
    listed = {e.name: e.category for e in catalog.environments} if catalog is not None else {}
    out = {}
    for scenario in scenarios:
        category = listed.get(scenario)
        if category is None and store.has(scenario, "scenario.json"):
            category = store.scenario(scenario).category
        out[scenario] = category or "other"
    return out


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
    # pass@k (awm_rl.evaluation.metrics): k attempts per task; the tasks evaluated; per category (scenario.json's).
    k: int = 1
    tasks: int = 0
    pass_at_1: float = 0.0
    pass_at_k: float | None = None
    per_category: dict[str, dict[str, Any]] = field(default_factory=dict)
    failure_reasons: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    policy_cost_usd: float = 0.0
    cost_usd: float = 0.0
    # This session: episodes found on disk (a resumed run) and episodes run now.
    episodes_resumed: int = 0
    episodes_run: int = 0
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


def select_tasks(store: ArtifactStore, scenarios: list[str], tasks_per_env: int | None,
                 excluded: dict[str, list[int]], seed: int | None = None) -> list[TaskRecord]:
    """Each scenario's eligible tasks (with a verifier, not excluded): all of them (`tasks_per_env` None), the
    first `tasks_per_env`, or with `seed` a sample of that many drawn per scenario (the same for the same seed)."""
    chosen: list[TaskRecord] = []
    for scenario in scenarios:
        skip = set(excluded.get(scenario, []))
        records = [r for r in load_tasks(store, scenario) if r.task_idx not in skip and r.verifiers]
        if tasks_per_env is not None and len(records) > tasks_per_env:
            records = (records[:tasks_per_env] if seed is None else
                       sorted(random.Random(f"{seed}:{scenario}").sample(records, tasks_per_env), key=lambda r: r.task_idx))
        chosen.extend(records)
    return chosen


def required_calls(store: ArtifactStore, scenarios: list[str]) -> dict[tuple[str, int], int]:
    """(scenario, task_idx) -> tool calls of the task's reference solution, where it has one."""
    from awm_rl.quality.solutions import load_solutions

    out = {}
    for scenario in scenarios:
        entries = [v for r in load_tasks(store, scenario) for v in r.verifiers]
        out.update({(scenario, i): len(s.calls) for i, s in load_solutions(store.scenario_dir(scenario), entries).items()})
    return out


def outcome_rows(episodes: list[Episode], scores: list[EpisodeScore],
                 failed: list[bool] | None = None) -> list[tuple[str, int, str, int]]:
    """(scenario, task_idx, outcome, turns) of each episode, for the per-task difficulty records
    (awm_resources.difficulty): a policy-side failure (`failed`, by default a `policy_error` termination) is its
    own outcome there, not an attempt."""
    bad = failed if failed is not None else [e.termination == "policy_error" for e in episodes]
    return [(e.scenario, e.task_idx, "policy_failure" if f else s.outcome, e.turns)
            for e, s, f in zip(episodes, scores, bad, strict=True)]


class RequestLimit:
    """A policy with at most `limit` turns being generated at once: the requests in flight to a model server or
    API stay bounded however many episodes run. Everything else (name, reasoning, ...) is the policy's."""

    def __init__(self, policy: Policy, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_requests must be at least 1, got {limit}")
        self.policy, self.limit, self.name = policy, limit, policy.name
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self.in_flight = self.peak = 0

    def __getattr__(self, item: str) -> Any:
        return getattr(self.policy, item)

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        with self._slots:
            with self._lock:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            try:
                return self.policy.generate(request)
            finally:
                with self._lock:
                    self.in_flight -= 1


# ----------------------------------------------------------------------------------------- run folder
def episode_id(scenario: str, task_idx: int, attempt: int) -> str:
    return f"{scenario}.t{task_idx}.a{attempt}"


def read_episodes(out_dir: Path) -> dict[str, tuple[Episode, EpisodeScore]]:
    """Every finished episode of a run folder, by `episode_id`."""
    out = {}
    for path in sorted((Path(out_dir) / "episodes").glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            episode, score = Episode.model_validate(doc["episode"]), EpisodeScore.model_validate(doc["score"])
            attempt = int(doc.get("attempt", 0))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EvaluationRunError(f"episode file {path} is unreadable ({type(exc).__name__}: {exc}); delete it "
                                     "to run that episode again") from exc
        out[episode_id(episode.scenario, episode.task_idx, attempt)] = (episode, score)
    return out


def open_run(out_dir: Path, plan: dict[str, Any], tasks: list[tuple[str, int]], run_id: str | None,
             excluded: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """The run folder's `run.json`: written for a new run; for an existing one its plan must be `plan` (else
    EvaluationRunError naming what differs), and its task list and difficulty run are the run's."""
    path = Path(out_dir) / RUN_FILE
    plan = json.loads(json.dumps(plan))
    if not path.is_file():
        doc = {"plan": plan, "tasks": [list(t) for t in tasks], "excluded": excluded or {},
               "difficulty_run": run_id or new_run_id("evaluation"), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        atomic_write_json(path, doc)
        return doc
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        stored, doc["tasks"], doc["difficulty_run"] = doc["plan"], doc["tasks"], doc["difficulty_run"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvaluationRunError(f"{path} is unreadable ({type(exc).__name__}: {exc})") from exc
    differ = [f"{key} {stored.get(key)!r} there, {value!r} now" for key, value in plan.items() if stored.get(key) != value]
    if differ:
        raise EvaluationRunError(f"{out_dir} holds another evaluation ({'; '.join(differ)}): resume it with its own "
                                 "options, or evaluate into another folder")
    return doc


def record_difficulty(store: ArtifactStore, out_dir: Path, run: str, policy: str,
                      done: dict[str, tuple[Episode, EpisodeScore]]) -> int:
    """Add the run folder's episodes not yet in the store's difficulty records as one new part; returns how many.
    `difficulty_parts.json` names each part's episodes, written before the part: a part named there whose file
    is missing (a crash between the two) was never written, so its episodes count as unrecorded."""
    ledger_path = Path(out_dir) / LEDGER_FILE
    ledger: dict[str, list[str]] = json.loads(ledger_path.read_text(encoding="utf-8")) if ledger_path.is_file() else {}
    ledger = {part: ids for part, ids in ledger.items() if (store.difficulty_dir / run / f"{part}.json").is_file()}
    recorded = {i for ids in ledger.values() for i in ids}
    new = sorted(set(done) - recorded)
    if not new:
        return 0
    number = len(ledger) + 1
    while f"episodes-{number}" in ledger or (store.difficulty_dir / run / f"episodes-{number}.json").exists():
        number += 1
    part = f"episodes-{number}"
    atomic_write_json(ledger_path, {**ledger, part: new})
    record_rollouts(store, run=run, source="evaluation", policy=policy, part=part,
                    rows=outcome_rows([done[i][0] for i in new], [done[i][1] for i in new]))
    return len(new)


def run_pending(pool: ToolEnvironments, policy: Policy, judge: Judge, jobs: list[tuple[TaskRecord, int]],
                config: LoopConfig, out_dir: Path, *, concurrency: int, keep_databases: bool = False,
                progress: Callable[[str], None] | None = None) -> int:
    """Run, judge and write each (task, attempt) as it finishes, `concurrency` at once; returns how many ran.
    The first exception (a PolicyConfigError from the loop, an interrupt, a judge failure) stops new episodes
    from starting, lets the running ones finish and is raised."""
    stop = threading.Event()
    total = len(jobs)
    finished = [0]
    lock = threading.Lock()

    def one(job: tuple[TaskRecord, int]) -> int:
        record, attempt = job
        if stop.is_set():
            return 0
        try:
            episode = run_episode(pool, policy, EpisodeSpec(record.scenario, record.task_idx, record.task), config)
            [score] = score_episodes([episode], [record], judge)
        except BaseException:
            stop.set()
            raise
        if not keep_databases:
            discard_snapshot(episode)
        name = episode_id(record.scenario, record.task_idx, attempt)
        atomic_write_json(Path(out_dir) / "episodes" / f"{name}.json",
                          {"attempt": attempt, "episode": json.loads(episode.model_dump_json()),
                           "score": json.loads(score.model_dump_json())})
        with lock:
            finished[0] += 1
            count = finished[0]
        if progress is not None:
            progress(f"[{count}/{total}] {name}: {score.outcome} in {episode.turns} turns")
        return 1

    if not jobs:
        return 0
    first: BaseException | None = None
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(jobs)))) as executor:
        futures = [executor.submit(one, job) for job in jobs]
        try:
            for future in as_completed(futures):
                try:
                    future.result()
                except Exception as exc:  # noqa: BLE001  kept and raised once the running episodes are done
                    first = first or exc
        except BaseException:  # an interrupt: start nothing more; the executor waits for the running ones
            stop.set()
            raise
    if first is not None:
        raise first
    return finished[0]


def evaluate(store: ArtifactStore, pool: ToolEnvironments, policy: Policy, judge: Judge, *, out_dir: Path,
             tasks_per_env: int | None = 3, k: int = 1, seed: int | None = None, window: int | None = 10,
             max_turns: int = 20, scenarios: list[str] | None = None, concurrency: int = 4,
             max_requests: int | None = None, excluded: dict[str, list[int]] | None = None,
             keep_databases: bool = False, run_id: str | None = None,
             progress: Callable[[str], None] | None = None) -> EvaluationReport:
    """Run the plan's episodes not yet in `out_dir` (all of them in a new folder), judge and write each as it
    finishes, record them in the store's per-task difficulty records as run `run_id` (default: a new id; a
    resumed folder keeps its own) and write the report of every episode there. Raises EvaluationRunError for a
    folder holding another plan, and whatever stopped the run (PolicyConfigError) after recording what finished."""
    started = time.perf_counter()
    if k < 1:
        raise ValueError(f"k (attempts per task) must be at least 1, got {k}")
    if tasks_per_env is not None and tasks_per_env < 1:
        raise ValueError(f"tasks_per_env must be at least 1 (None: every eligible task), got {tasks_per_env}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = {"policy": policy.name, "reasoning": getattr(policy, "reasoning", "required"),
            "tool_calling": getattr(policy, "tool_calling", "text"), "judge_mode": judge.mode,
            "tasks_per_env": tasks_per_env, "k": k, "seed": seed, "window": window, "max_turns": max_turns}
    resumed = (out_dir / RUN_FILE).is_file()
    if resumed:  # the run's own task list, whatever the catalog holds now
        run = open_run(out_dir, plan, [], run_id)
        by_scenario: dict[str, list[TaskRecord]] = {}
        for scenario, _ in run["tasks"]:
            by_scenario.setdefault(scenario, load_tasks(store, scenario))
        missing = [f"{s} task {i}" for s, i in run["tasks"] if not 0 <= i < len(by_scenario[s])]
        if missing:
            raise EvaluationRunError(f"{out_dir} evaluates tasks the store no longer has ({', '.join(missing[:5])}): "
                                     "evaluate into another folder")
        records = [by_scenario[s][i] for s, i in run["tasks"]]
        excluded = run.get("excluded") or {}
    else:
        scenarios = catalog_scenarios(store) if scenarios is None else scenarios
        if excluded is None:
            from awm_rl.quality.gate import ineligible_tasks

            excluded = ineligible_tasks(store, scenarios)
        records = select_tasks(store, scenarios, tasks_per_env, excluded, seed)
        run = open_run(out_dir, plan, [(r.scenario, r.task_idx) for r in records], run_id, excluded)
    difficulty_run = run["difficulty_run"]
    evaluated = sorted({r.scenario for r in records})
    catalog = store.catalog()
    provenance = run_provenance(store, evaluated, catalog.ready() if catalog else None)
    wanted = {episode_id(r.scenario, r.task_idx, a): (r, a) for r in records for a in range(k)}
    on_disk = read_episodes(out_dir)
    jobs = [job for name, job in wanted.items() if name not in on_disk]
    config = LoopConfig(max_turns=max_turns, window=window, snapshot_dir=out_dir / "databases")
    bounded = RequestLimit(policy, max_requests) if max_requests else policy
    if jobs and hasattr(pool, "start"):  # a pool started on demand (the command's): here, in the calling thread
        pool.start()
    try:
        ran = run_pending(pool, bounded, judge, jobs, config, out_dir, concurrency=concurrency,
                          keep_databases=keep_databases, progress=progress)
    finally:  # what finished is recorded, also when a configuration error or an interrupt stopped the run
        record_difficulty(store, out_dir, difficulty_run, policy.name,
                          {n: v for n, v in read_episodes(out_dir).items() if n in wanted})
    done = read_episodes(out_dir)
    names = [n for n in wanted if n in done]
    pairs = [done[n] for n in names]
    report = build_report(store, pairs, k=k, out_dir=out_dir, excluded=excluded, provenance=provenance)
    report.episode_files = [str(out_dir / "episodes" / f"{n}.json") for n in names]
    report.episodes_resumed, report.episodes_run = len(on_disk.keys() & wanted.keys()), ran
    report.wall_s = round(time.perf_counter() - started, 2)
    report.plot = str(plot_pass_rate_by_bucket(report, out_dir / "pass_rate_by_bucket.png"))
    report.difficulty_run = difficulty_run
    report.per_task, report.difficulty_buckets = per_task_difficulty(store, policy.name, pairs)
    report.difficulty_plot = str(plot_task_difficulty(report, out_dir / "task_difficulty.png"))
    atomic_write_json(out_dir / "report.json", {**report.summary(), **plan, "max_requests": max_requests,
                                                "concurrency": concurrency, "resumed": resumed})
    return report


def build_report(store: ArtifactStore, pairs: list[tuple[Episode, EpisodeScore]], *, k: int, out_dir: Path,
                 excluded: dict[str, list[int]], provenance: dict[str, Any]) -> EvaluationReport:
    """The aggregate numbers of the episodes (awm_rl.evaluation.metrics.group_stats): overall, per environment, per
    category, per difficulty bucket (tool calls of the task's reference solution, else the calls made)."""
    by_env: dict[str, list] = {}
    by_category: dict[str, list] = {}
    by_bucket: dict[str, list] = {name: [] for name, _, _ in BUCKETS}
    scenarios = sorted({e.scenario for e, _ in pairs})
    categories = scenario_categories(store, scenarios)
    required = required_calls(store, scenarios)
    for episode, score in pairs:
        by_env.setdefault(episode.scenario, []).append((episode, score))
        by_category.setdefault(categories[episode.scenario], []).append((episode, score))
        # Difficulty is what the task requires (its reference solution), not what the agent happened to do.
        need = required.get((episode.scenario, episode.task_idx))
        by_bucket[bucket_of(episode.tool_calls if need is None else need)].append((episode, score))
    overall = group_stats(pairs, k)
    per_environment = {name: {"category": categories[name], **group_stats(items, k)} for name, items in sorted(by_env.items())}
    return EvaluationReport(
        episodes=overall["episodes"], pass_rate=overall["pass_rate"], mean_reward=overall["mean_reward"],
        format_error_rate=overall["format_error_rate"], environment_error_rate=overall["environment_error_rate"],
        mean_turns=overall["mean_turns"], per_environment=per_environment,
        per_bucket={name: group_stats(items, k) for name, items in by_bucket.items()}, excluded_tasks=excluded,
        judge_tokens=overall["judge_tokens"], judge_cost_usd=overall["judge_cost_usd"], wall_s=0.0,
        out_dir=str(out_dir), k=k, tasks=overall["tasks"], pass_at_1=overall["pass_at_1"],
        pass_at_k=overall["pass_at_k"], per_category={c: group_stats(v, k) for c, v in sorted(by_category.items())},
        failure_reasons=overall["failure_reasons"], prompt_tokens=overall["prompt_tokens"],
        completion_tokens=overall["completion_tokens"], policy_cost_usd=overall["policy_cost_usd"],
        cost_usd=overall["cost_usd"], **provenance,
    )


def per_task_difficulty(store: ArtifactStore, policy: str,
                        pairs: list[tuple[Episode, EpisodeScore]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per evaluated task: its outcomes in this run (`outcome`: the first attempt's; `completed_here` of
    `attempts_here`) and the policy's record over every run in the store (attempts, pass rate, bucket); hardest
    first. And the evaluated tasks per bucket."""
    merged = load_difficulty(store).tasks(policy=policy)
    here: dict[tuple[str, int], list[tuple[Episode, EpisodeScore]]] = {}
    for episode, score in pairs:
        here.setdefault((episode.scenario, episode.task_idx), []).append((episode, score))
    tasks = with_untried(merged, list(here))
    rows = []
    for task in tasks:
        attempts = here[(task.scenario, task.task_idx)]
        episode, score = attempts[0]
        row = task.row()
        rows.append({"scenario": task.scenario, "task": task.task_idx, "outcome": score.outcome, "reward": score.reward,
                     "turns": episode.turns, "tool_calls": episode.tool_calls, "attempts_here": len(attempts),
                     "completed_here": sum(s.outcome == "completed" for _, s in attempts),
                     "attempts": row["attempts"], "pass_rate": row["pass_rate"], "bucket": row["bucket"],
                     "mean_turns": row["mean_turns"]})
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
