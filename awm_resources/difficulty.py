"""Per-task difficulty: how often each task was completed, by which policy, in which run and step.

Every evaluation and every training rollout adds to these records, so the catalog can show each task's pass
rate, the evaluation a per-task table, and the training curriculum can prefer tasks that are neither always
failed nor always solved. A run writes parts (`DifficultyPart`, one file each, written once and atomically
under `difficulty/<run>/`): an evaluation one part, a training process one part per scored batch of a step.
No file is ever appended to or rewritten, so concurrent runs and trainer processes cannot lose or half-write
each other's records; readers merge every part (`load_difficulty`). A part that cannot be read is reported
by path in `DifficultyIndex.problems`, never skipped silently.

Buckets by pass rate (completed / attempts; an attempt is a scored rollout, see `TaskTally`): `untried`
(no attempt), `unsolved` (0), `hard` (below 0.2), `medium` (0.2 to 0.8), `easy` (above 0.8).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from awm_resources.documents import DifficultyPart, DocumentError, TaskTally, read
from awm_resources.store import ArtifactStore

# An episode's outcome (awm_rl's EpisodeScore.outcome, or "policy_failure") -> the counter it adds to.
OUTCOME_FIELDS: dict[str, str] = {
    "completed": "completed", "partially_completed": "partial", "format_error": "format_errors",
    "environment_error": "environment_errors", "agent_error": "agent_errors", "policy_failure": "policy_failures",
}
COUNTERS = tuple(name for name in TaskTally.model_fields if name not in ("scenario", "task_idx"))  # every counter
HARD_BELOW = 0.2  # pass rates below this are hard
EASY_ABOVE = 0.8  # above this easy; between the two (inclusive) medium
# Bucket name -> what it means, in the order the UI lists them.
BUCKETS: dict[str, str] = {
    "untried": "no scored attempt yet",
    "unsolved": "attempted, never completed",
    "hard": f"pass rate below {HARD_BELOW}",
    "medium": f"pass rate {HARD_BELOW} to {EASY_ABOVE}",
    "easy": f"pass rate above {EASY_ABOVE}",
}

TaskKey = tuple[str, int]
# (scenario, task_idx, outcome, turns) of one rollout
OutcomeRow = tuple[str, int, str, int]


def bucket_of(pass_rate: float | None, attempts: int) -> str:
    """The difficulty bucket of a task with `attempts` scored rollouts and this pass rate."""
    if attempts <= 0 or pass_rate is None:
        return "untried"
    if pass_rate <= 0.0:
        return "unsolved"
    if pass_rate < HARD_BELOW:
        return "hard"
    if pass_rate <= EASY_ABOVE:
        return "medium"
    return "easy"


def bucket_rank(name: str) -> int:
    """Position of a bucket in `BUCKETS` (unknown names last), for sorting tables."""
    names = list(BUCKETS)
    return names.index(name) if name in names else len(names)


def tally(rows: Iterable[OutcomeRow]) -> list[TaskTally]:
    """Per-task counts of rollouts given as (scenario, task_idx, outcome, turns); tasks in first-seen order.
    An outcome this module does not know is an error (it would otherwise be counted as nothing)."""
    counts: dict[TaskKey, dict[str, Any]] = {}
    for scenario, task_idx, outcome, turns in rows:
        if outcome not in OUTCOME_FIELDS:
            raise ValueError(f"rollout of {scenario}/{task_idx}: unknown outcome {outcome!r} "
                             f"(known: {', '.join(OUTCOME_FIELDS)})")
        entry = counts.setdefault((scenario, task_idx), {"scenario": scenario, "task_idx": task_idx,
                                                         **{c: 0 for c in COUNTERS}})
        entry[OUTCOME_FIELDS[outcome]] += 1
        if outcome != "policy_failure":
            entry["attempts"] += 1
            entry["turns"] += int(turns)
    return [TaskTally.model_validate(entry) for entry in counts.values()]


def new_run_id(prefix: str) -> str:
    """A run id unique across processes and machines: prefix, UTC time, random suffix."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def record_rollouts(store: ArtifactStore, *, run: str, source: str, policy: str, rows: list[OutcomeRow],
                    part: str, step: int | None = None) -> DifficultyPart | None:
    """Write one part of `run`'s records (nothing when there is no rollout); returns it."""
    if source not in ("evaluation", "training"):
        raise ValueError(f"difficulty source must be 'evaluation' or 'training', got {source!r}")
    tasks = tally(rows)
    if not tasks:
        return None
    doc = DifficultyPart(run=run, source=source, policy=policy, step=step, written_at=time.time(), tasks=tasks)
    store.write_difficulty(doc, part)
    return doc


class TaskDifficulty(TaskTally):
    """A task's counts (TaskTally's) merged over the parts read, the policies they came from, its pass rate and
    bucket. In memory only: the store keeps the parts."""

    policies: set[str] = Field(default_factory=set)

    @classmethod
    def of(cls, key: TaskKey) -> TaskDifficulty:
        """A task without counts yet (untried)."""
        return cls(scenario=key[0], task_idx=key[1])

    def add(self, counts: TaskTally, policy: str) -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(counts, name))
        self.policies.add(policy)

    @property
    def pass_rate(self) -> float | None:
        return self.completed / self.attempts if self.attempts else None

    @property
    def mean_turns(self) -> float | None:
        return self.turns / self.attempts if self.attempts else None

    @property
    def bucket(self) -> str:
        return bucket_of(self.pass_rate, self.attempts)

    def row(self) -> dict[str, Any]:
        """A flat dict for tables: counts, rates rounded, bucket."""
        rate = self.pass_rate
        turns = self.mean_turns
        return {"scenario": self.scenario, "task": self.task_idx, "attempts": self.attempts,
                "completed": self.completed, "partial": self.partial, "format_errors": self.format_errors,
                "environment_errors": self.environment_errors, "agent_errors": self.agent_errors,
                "policy_failures": self.policy_failures, "pass_rate": None if rate is None else round(rate, 4),
                "mean_turns": None if turns is None else round(turns, 2), "bucket": self.bucket,
                "policies": ", ".join(sorted(self.policies))}


@dataclass
class DifficultyIndex:
    """Every part read from the store, and the files that could not be read (path: why)."""

    parts: list[DifficultyPart]
    problems: list[str] = field(default_factory=list)

    def tasks(self, *, policy: str | None = None, source: str | None = None, run: str | None = None,
              policies: Iterable[str] | None = None) -> dict[TaskKey, TaskDifficulty]:
        """Merged counts per task, over the parts matching every filter given (`policies`: any of these)."""
        wanted = set(policies) if policies is not None else None
        out: dict[TaskKey, TaskDifficulty] = {}
        for part in self.parts:
            if (policy is not None and part.policy != policy) or (source is not None and part.source != source) \
                    or (run is not None and part.run != run) or (wanted is not None and part.policy not in wanted):
                continue
            for counts in part.tasks:
                key = (counts.scenario, counts.task_idx)
                out.setdefault(key, TaskDifficulty.of(key)).add(counts, part.policy)
        return out

    def by_step(self, run: str) -> dict[int, dict[TaskKey, TaskDifficulty]]:
        """A training run's merged counts per step and task."""
        steps: dict[int, dict[TaskKey, TaskDifficulty]] = {}
        for part in self.parts:
            if part.run == run and part.step is not None:
                per_task = steps.setdefault(part.step, {})
                for counts in part.tasks:
                    key = (counts.scenario, counts.task_idx)
                    per_task.setdefault(key, TaskDifficulty.of(key)).add(counts, part.policy)
        return dict(sorted(steps.items()))

    def policies(self) -> list[str]:
        return sorted({p.policy for p in self.parts})

    def by_policy(self) -> dict[str, dict[TaskKey, TaskDifficulty]]:
        """Merged counts per policy and task: no policy's records averaged with another's."""
        out: dict[str, dict[TaskKey, TaskDifficulty]] = {}
        for part in self.parts:
            per_task = out.setdefault(part.policy, {})
            for counts in part.tasks:
                key = (counts.scenario, counts.task_idx)
                per_task.setdefault(key, TaskDifficulty.of(key)).add(counts, part.policy)
        return dict(sorted(out.items()))

    def latest_policy(self) -> dict[TaskKey, str]:
        """Per task, the policy whose records of it were written last (the newest evaluation or training run)."""
        newest: dict[TaskKey, tuple[float, str]] = {}
        for part in self.parts:
            for counts in part.tasks:
                key = (counts.scenario, counts.task_idx)
                if key not in newest or part.written_at >= newest[key][0]:
                    newest[key] = (float(part.written_at), part.policy)
        return {key: policy for key, (_, policy) in newest.items()}


def load_difficulty(store: ArtifactStore) -> DifficultyIndex:
    """Every difficulty part in the store; unreadable ones are listed in `problems` with their path."""
    parts, problems = [], []
    for path in store.difficulty_files():
        try:
            parts.append(read(DifficultyPart, path))
        except (DocumentError, OSError) as exc:
            problems.append(f"{path}: {exc}")
    return DifficultyIndex(parts, problems)


def bucket_counts(tasks: Iterable[TaskDifficulty]) -> dict[str, int]:
    """Tasks per bucket, every bucket listed (zeros included), in `BUCKETS` order."""
    out = dict.fromkeys(BUCKETS, 0)
    for task in tasks:
        out[task.bucket] += 1
    return out


def with_untried(merged: dict[TaskKey, TaskDifficulty], tasks: Iterable[TaskKey]) -> list[TaskDifficulty]:
    """Each of `tasks` with its merged counts; a task without records appears as untried (zero counts)."""
    return [merged.get(key) or TaskDifficulty.of(key) for key in tasks]


def _rate(task: TaskDifficulty) -> str:
    return f"{task.pass_rate:.2f} of {task.attempts}" if task.pass_rate is not None else "0 attempts"


def latest_policy_view(index: DifficultyIndex, tasks: Iterable[TaskKey]) -> list[dict[str, Any]]:
    """Each of `tasks` as a table row (`TaskDifficulty.row`) with the counts of the policy that was recorded on
    it last (`policy`), not pooled with older policies' records: those are listed apart (`other_policies`, each
    with its pass rate and attempts). A task without records is an untried row with no policy."""
    per_policy, latest = index.by_policy(), index.latest_policy()
    rows = []
    for key in tasks:
        policy = latest.get(key)
        task = per_policy[policy][key] if policy is not None else TaskDifficulty.of(key)
        others = [f"{p} {_rate(t[key])}" for p, t in per_policy.items() if p != policy and key in t]
        rows.append({**task.row(), "policy": policy or "", "other_policies": "; ".join(others)})
    return rows


def policy_summary(index: DifficultyIndex, tasks: Iterable[TaskKey]) -> list[dict[str, Any]]:
    """Per policy, over `tasks` (e.g. the catalog's trainable ones): tasks attempted, attempts, completions, the
    pass rate over its attempts, tasks per bucket by its own records, and when it was last recorded."""
    keys = list(tasks)
    last: dict[str, float] = {}
    for part in index.parts:
        last[part.policy] = max(last.get(part.policy, 0.0), float(part.written_at))
    rows = []
    for policy, per_task in index.by_policy().items():
        mine = [per_task[k] for k in keys if k in per_task and per_task[k].attempts]
        if not mine:
            continue
        attempts, completed = sum(t.attempts for t in mine), sum(t.completed for t in mine)
        rows.append({"policy": policy, "tasks": len(mine), "attempts": attempts, "completed": completed,
                     "pass_rate": round(completed / attempts, 4),
                     **{k: v for k, v in bucket_counts(mine).items() if k != "untried"},
                     "last_recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last[policy]))})
    return sorted(rows, key=lambda r: r["last_recorded"], reverse=True)
