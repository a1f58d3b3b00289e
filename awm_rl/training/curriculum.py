"""A curriculum for GRPO: which tasks each step trains on, chosen from what the policy passes.

Three mechanisms, each logged per step (the `curriculum` entry of the step's record in `metrics.jsonl`):

- Dynamic sampling (DAPO): a group whose G rewards are all equal has zero advantages and carries no policy
  gradient, so it is not trained on; its slot is refilled with another task's G rollouts, for at most
  `max_refill_rounds` rounds and `max_refill_groups` groups a step. A slot still without reward variance
  after that gives no samples.
- A sampler preferring tasks whose pass rate is in a band (`band`, e.g. 0.2-0.8): weight 1 for tasks in the
  band or never attempted, `out_of_band_weight` for the others (weighted sampling without replacement).
  Pass rates start from the store's per-task difficulty records (awm_resources.difficulty) and are updated
  with every rollout of the run.
- Retirement: a task this run's policy has completed `retire_after` times in a row (rollouts in order)
  is not chosen again; when every task is retired, the retired ones are chosen again (and that is logged).

Off (`curriculum.enabled: false`), none of this runs: the step schedule is the fixed shuffled one.
The trainer shares the schedule list with the curriculum: choosing step k's tasks writes `schedule[k - 1]`,
so the trainer's instance prefetch reads the curriculum's choice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awm_resources.difficulty import TaskDifficulty
from awm_rl.reward import TaskRecord
from awm_rl.training.config import CurriculumConfig
from awm_rl.training.rollouts import ScoredRound, StepRollouts

TaskKey = tuple[str, int]


def task_key(record: TaskRecord) -> TaskKey:
    return (record.scenario, record.task_idx)


def label(key: TaskKey) -> str:
    return f"{key[0]}/{key[1]}"


# Where a chosen task stood when it was drawn, read from the reason `Curriculum.choose` logs for it.
BANDS = ("in band", "untried", "outside band")


def band_of(why: str) -> str:
    """'in band', 'untried' or 'outside band', from a logged reason such as 'outside band (pass rate 1.00 of 10)'."""
    head = why.split(" (")[0]
    if head not in BANDS:
        raise ValueError(f"curriculum reason {why!r} names no band (known: {', '.join(BANDS)})")
    return head


def band_counts(choices: list[dict[str, Any]]) -> dict[str, int]:
    """Chosen tasks per band (every band listed), from `chosen` or `refill_groups` of a step's log."""
    out = dict.fromkeys(BANDS, 0)
    for choice in choices:
        out[band_of(choice["why"])] += 1
    return out


def step_row(log: dict[str, Any]) -> dict[str, Any]:
    """A step's curriculum log as one flat row (the grpo_training asset's table): tasks drawn per band, groups
    dropped for equal rewards, refills, retirements."""
    chosen = band_counts(log["chosen"])
    return {"step": log["step"], "chosen": len(log["chosen"]), "chosen_in_band": chosen["in band"],
            "chosen_untried": chosen["untried"], "chosen_outside_band": chosen["outside band"],
            "dropped_groups": len(log["dropped_groups"]), "refill_rounds": log["refill_rounds"],
            "refill_groups": len(log["refill_groups"]), "refills_kept": log["refills_kept"], "groups_without_variance": log["groups_without_variance"],
            "retired": ", ".join(log["retired"]), "retired_total": log["retired_total"],
            "active_tasks": log["active_tasks"], "in_band_tasks": log["in_band_tasks"],
            "tasks": ", ".join(c["task"] for c in log["chosen"]), "dropped": ", ".join(log["dropped_groups"])}


# step_row's numbers summed over a run (summary.json's `curriculum.totals`).
TOTALS = ("chosen", "chosen_in_band", "chosen_untried", "chosen_outside_band", "dropped_groups", "refill_rounds",
          "refill_groups", "refills_kept", "groups_without_variance")


def task_row(record: TaskRecord) -> dict[str, Any]:
    """A dataset row for a task, as `tasks.dataset_rows` writes it (what the trainer receives from TRL)."""
    return {"prompt": [{"role": "user", "content": record.task}], "scenario": record.scenario,
            "task_idx": record.task_idx, "task": record.task}


def has_variance(scores: list[Any], failed: list[bool]) -> bool:
    """Whether a group's scored rewards differ (policy-side failures are unscored and do not count)."""
    rewards = {s.reward for s, bad in zip(scores, failed, strict=True) if not bad}
    return len(rewards) > 1


@dataclass
class _Group:
    """The G rollouts of one task within a scored round."""

    key: TaskKey
    rows: list[dict[str, Any]]
    rollouts: list[Any]
    scores: list[Any]
    failed: list[bool]

    @property
    def varies(self) -> bool:
        return has_variance(self.scores, self.failed)


def _groups(scored: ScoredRound, size: int) -> list[_Group]:
    n = len(scored.rows)
    if n % size:
        raise ValueError(f"{n} rollouts do not split into groups of {size}")
    out = []
    for start in range(0, n, size):
        rows = scored.rows[start:start + size]
        keys = {(r["scenario"], int(r["task_idx"])) for r in rows}
        if len(keys) != 1:
            raise ValueError(f"rollouts {start}-{start + size - 1} are not one task's group: {sorted(keys)}")
        out.append(_Group(keys.pop(), rows, scored.rollouts[start:start + size], scored.scores[start:start + size],
                          scored.failed[start:start + size]))
    return out


class Curriculum:
    """Chooses each step's tasks, refills groups without reward variance and retires solved tasks (module doc)."""

    def __init__(self, config: CurriculumConfig, tasks: list[TaskRecord], schedule: list[list[TaskRecord]], *,
                 group_size: int, tasks_per_step: int, seed: int,
                 prior: dict[TaskKey, TaskDifficulty] | None = None) -> None:
        if not tasks:
            raise ValueError("a curriculum needs at least one task")
        self.config = config
        self.tasks = {task_key(t): t for t in tasks}
        self.schedule = schedule
        self.group_size = group_size
        self.tasks_per_step = tasks_per_step
        self.rng = random.Random(seed)
        self.max_refill_groups = config.max_refill_groups or tasks_per_step
        # (attempts, completed) per task: the prior records, then every rollout of this run
        self.attempts = {k: 0 for k in self.tasks}
        self.completed = {k: 0 for k in self.tasks}
        for key, record in (prior or {}).items():
            if key in self.tasks:
                self.attempts[key] += record.attempts
                self.completed[key] += record.completed
        self.streak = {k: 0 for k in self.tasks}  # completed rollouts in a row, this run
        self.retired: dict[TaskKey, int] = {}  # task -> step it was retired at
        self.history: list[dict[str, Any]] = []
        self.last_choice: list[dict[str, Any]] = []  # the tasks `choose` picked last, each with why
        self._planned: dict[int, list[dict[str, Any]]] = {}  # step -> its scheduled tasks with why
        if schedule:
            self._plan(1)

    # -- estimates --------------------------------------------------------------------------------
    def pass_rate(self, key: TaskKey) -> float | None:
        return self.completed[key] / self.attempts[key] if self.attempts[key] else None

    def in_band(self, key: TaskKey) -> bool:
        rate = self.pass_rate(key)
        low, high = self.config.band
        return rate is None or low <= rate <= high

    def _reason(self, key: TaskKey) -> str:
        rate = self.pass_rate(key)
        if rate is None:
            return "untried"
        return f"{'in band' if self.in_band(key) else 'outside band'} (pass rate {rate:.2f} of {self.attempts[key]})"

    # -- choosing ---------------------------------------------------------------------------------
    def _plan(self, step: int) -> None:
        """Choose `step`'s tasks into the schedule (what the trainer prefetches instances for)."""
        self.schedule[step - 1] = self.choose(self.tasks_per_step)
        self._planned[step] = self.last_choice

    def choose(self, n: int, avoid: set[TaskKey] | frozenset[TaskKey] = frozenset()) -> list[TaskRecord]:
        """`n` tasks: weighted sampling without replacement among the active (not retired) tasks,
        weight 1 in the band or untried and `out_of_band_weight` outside it; tasks in `avoid` (already in this
        step) after the others, and tasks of weight 0 last of all; a task repeats only when fewer than `n` are
        active."""
        active = [k for k in self.tasks if k not in self.retired]
        fallback = not active
        if fallback:  # every task retired: keep training on them rather than on nothing
            active = list(self.tasks)
        weight_out = self.config.out_of_band_weight

        def sort_key(key: TaskKey) -> tuple[bool, bool, float]:
            weight = 1.0 if self.in_band(key) else weight_out
            # Efraimidis-Spirakis: the n largest u^(1/w) are a weighted sample without replacement
            draw = self.rng.random() ** (1.0 / weight) if weight > 0 else self.rng.random()
            return (weight == 0, key in avoid, -draw)

        order = sorted(active, key=sort_key)
        picked = [order[i % len(order)] for i in range(n)]
        self.last_choice = [{"task": label(k), "why": self._reason(k) + (" (every task retired)" if fallback else "")}
                            for k in picked]
        return [self.tasks[k] for k in picked]

    def rows_for(self, step: int) -> list[dict[str, Any]]:
        """The trainer's input rows of `step`: each of the step's tasks G times, in schedule order."""
        return [task_row(record) for record in self.schedule[step - 1] for _ in range(self.group_size)]

    # -- what happened ----------------------------------------------------------------------------
    def observe(self, step: int, groups: list[_Group]) -> list[str]:
        """Add the groups' scored rollouts to the pass rates and streaks; returns the tasks retired now."""
        retired_now = []
        for group in groups:
            key = group.key
            for score, bad in zip(group.scores, group.failed, strict=True):
                if bad:
                    continue
                self.attempts[key] += 1
                done = score.outcome == "completed"
                self.completed[key] += int(done)
                self.streak[key] = self.streak[key] + 1 if done else 0
            retire = self.config.retire_after
            if retire is not None and key not in self.retired and self.streak[key] >= retire:
                self.retired[key] = step
                retired_now.append(label(key))
        return retired_now

    def fill_step(self, step: int, first: ScoredRound, run: Callable[[list[dict[str, Any]]], ScoredRound]) -> StepRollouts:
        """The step's groups after dynamic sampling (`run` runs and judges more rows: the refill groups), the
        next step's tasks chosen into the schedule, and the step's log (also in `history`)."""
        size = self.group_size
        groups = _groups(first, size)
        retired = self.observe(step, groups)
        dropped = [label(g.key) for g in groups if not g.varies]
        rounds, kept = [first], 0
        refills: list[dict[str, Any]] = []
        empty = [i for i, g in enumerate(groups) if not g.varies] if self.config.dynamic_sampling else []
        while empty and len(rounds) - 1 < self.config.max_refill_rounds and len(refills) < self.max_refill_groups:
            slots = empty[:self.max_refill_groups - len(refills)]
            in_step = {g.key for g in groups}
            replacements = self.choose(len(slots), avoid=in_step)
            why = self.last_choice
            scored = run([task_row(record) for record in replacements for _ in range(size)])
            rounds.append(scored)
            new = _groups(scored, size)
            retired += self.observe(step, new)
            for slot, group, choice in zip(slots, new, why, strict=True):
                groups[slot] = group
                kept += int(group.varies)
                refills.append({**choice, "round": len(rounds) - 1, "varies": group.varies})
            empty = [i for i in empty if not groups[i].varies]
        train = [not self.config.dynamic_sampling or g.varies for g in groups for _ in g.rows]
        if step < len(self.schedule):
            self._plan(step + 1)
        log = {
            "step": step,
            "chosen": self._planned.pop(step, []),
            "dropped_groups": dropped,  # no reward variance in the first round
            "refill_rounds": len(rounds) - 1,
            "refill_groups": refills,
            "refills_kept": kept,
            "groups_without_variance": len(empty) if self.config.dynamic_sampling else len(dropped),
            "retired": retired,
            "retired_total": len(self.retired),
            "active_tasks": len(self.tasks) - len(self.retired),
            "in_band_tasks": sum(self.in_band(k) for k in self.tasks if k not in self.retired),
            "next": [label(task_key(t)) for t in self.schedule[step]] if step < len(self.schedule) else [],
        }
        self.history.append(log)
        return StepRollouts(
            rows=[row for g in groups for row in g.rows], rollouts=[r for g in groups for r in g.rollouts],
            scores=[s for g in groups for s in g.scores], failed=[b for g in groups for b in g.failed], train=train,
            rounds=rounds, curriculum=log)

    def metrics(self, log: dict[str, Any]) -> dict[str, Any]:
        """The step record's numbers (TensorBoard plots them) and the whole log under `curriculum`."""
        chosen = band_counts(log["chosen"])
        return {"curriculum_chosen_in_band": chosen["in band"], "curriculum_chosen_untried": chosen["untried"],
                "curriculum_chosen_outside_band": chosen["outside band"],
                "curriculum_dropped_groups": len(log["dropped_groups"]),
                "curriculum_refill_groups": len(log["refill_groups"]),
                "curriculum_refills_kept": log["refills_kept"],
                "curriculum_groups_without_variance": log["groups_without_variance"],
                "curriculum_retired_total": log["retired_total"],
                "curriculum_in_band_tasks": log["in_band_tasks"], "curriculum": log}

    def message(self, log: dict[str, Any]) -> str:
        """One line for the step's events (the grpo_training asset's log)."""
        bands = band_counts(log["chosen"])
        return (f"curriculum step {log['step']}: {len(log['chosen'])} tasks ({bands['in band']} in band, "
                f"{bands['untried']} untried, {bands['outside band']} outside); {len(log['dropped_groups'])} group(s) without reward "
                f"variance dropped, {len(log['refill_groups'])} refilled in {log['refill_rounds']} round(s) "
                f"({log['refills_kept']} kept), {log['groups_without_variance']} left without samples; retired "
                f"{', '.join(log['retired']) or 'none'} ({log['retired_total']} in all)")

    def summary(self) -> dict[str, Any]:
        """For `summary.json`: the config, what it did over the run (`totals` of `step_row`'s numbers: tasks drawn
        per band, groups dropped for equal rewards, refills), the retired tasks and each task's pass rate at the end."""
        rows = [step_row(log) for log in self.history]
        return {"config": self.config.model_dump(), "steps": len(self.history),
                "totals": {k: sum(r[k] for r in rows) for k in TOTALS},
                "retired": {label(k): s for k, s in self.retired.items()},
                "pass_rates": {label(k): None if rate is None else round(rate, 4)
                               for k, rate in ((k, self.pass_rate(k)) for k in self.tasks)}}
