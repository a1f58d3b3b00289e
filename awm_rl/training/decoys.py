"""Decoy episodes: a task's reference solution with one argument value changed, confirmed failing by its verifier.

Why: a GRPO-learnable starting policy knows the format and the tools but is unsure of a decision the
reward decides. A tiny model warm-started on a task's reference episode alone memorises it (or breaks);
warm-started on the reference plus k-1 decoys that share every token up to one argument value, it
learns the format to convergence and puts about 1/k on each value of that argument: its rollouts are
well formed, about 1/k of them pass, and the reward (the task's own verifier) is what tells the values
apart. Nothing about the answer is given to the policy or the reward: the decoys are built from the
tool schemas (enum values), the values the reference episode's earlier tool results show for the same
key, and neighbouring integers, and each is replayed through the real loop and pool and kept only when
the task's verifier says it does NOT complete the task.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from awm_rl.agent.episode import Episode
from awm_rl.agent.loop import EpisodeSpec, LoopConfig, ToolEnvironments, discard_snapshot, run_episode, scenario_tools
from awm_rl.agent.policies import ScriptedPolicy, solution_turns
from awm_rl.reward.judge import Judge
from awm_rl.reward.tasks import TaskRecord


@dataclass
class Variant:
    """One scripted episode of a task: the reference (`change` None) or a decoy."""

    calls: list[dict[str, Any]]
    final_answer: str | None
    change: dict[str, Any] | None = None  # {"call": i, "tool", "argument", "reference", "decoy"}
    episode: Episode | None = None
    classification: str | None = None

    def turns(self) -> list[str]:
        return solution_turns(self.calls, self.final_answer)


@dataclass
class TaskDecoys:
    """A task's reference variant and its decoys confirmed failing; what was tried and dropped."""

    record: TaskRecord
    reference: Variant
    decoys: list[Variant] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # candidates the verifier passed, or that broke

    @property
    def variants(self) -> list[Variant]:
        return [self.reference, *self.decoys]

    def report(self) -> dict[str, Any]:
        return {"task": f"{self.record.scenario}/{self.record.task_idx}",
                "reference": self.reference.classification,
                "decoys": [{**(d.change or {}), "verdict": d.classification} for d in self.decoys],
                "dropped": self.dropped}


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return type(a) is type(b)


def _values_under(obj: Any, keys: set[str]) -> Iterator[Any]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in keys and not isinstance(value, dict | list):
                yield value
            yield from _values_under(value, keys)
    elif isinstance(obj, list):
        for value in obj:
            yield from _values_under(value, keys)


def alternative_values(name: str, value: Any, prop: dict[str, Any], results: list[str]) -> list[Any]:
    """Plausible other values for argument `name` (same JSON type), in order of preference: the schema's other
    enum values, values the earlier tool results (`results`, JSON texts) show under the same key (or under
    `id` for an `*_id` argument), then for an integer its neighbours, for a boolean its negation."""
    if isinstance(value, dict | list) or value is None:
        return []
    found: list[Any] = list(prop.get("enum") or [])
    keys = {name} | ({"id"} if name.endswith("_id") else set())
    for text in results:
        try:
            found += list(_values_under(json.loads(text), keys))
        except (json.JSONDecodeError, TypeError):
            continue
    if isinstance(value, bool):
        found.append(not value)
    elif isinstance(value, int):
        found += [value + 1, value + 2] + ([value - 1] if value > 1 else [])
    out: list[Any] = []
    for candidate in found:
        if _same_kind(candidate, value) and candidate != value and candidate not in out:
            out.append(candidate)
    return out


def candidate_changes(calls: list[dict[str, Any]], tools: list[dict[str, Any]],
                      results: list[str]) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(changed calls, what changed) for one argument value at a time: the last call first (in a search-then-act
    task, the act), its arguments in order, each argument's alternatives in order. `results[i]` is the text the
    environment answered to calls[i] in the reference episode (only earlier answers feed a call's alternatives)."""
    schemas = {t["name"]: (t.get("input_schema") or {}).get("properties") or {} for t in tools}
    for i in reversed(range(len(calls))):
        call = calls[i]
        for name, value in (call.get("arguments") or {}).items():
            prop = schemas.get(call["tool"], {}).get(name) or {}
            for alt in alternative_values(name, value, prop, results[:i]):
                changed = copy.deepcopy(calls)
                changed[i]["arguments"][name] = alt
                yield changed, {"call": i, "tool": call["tool"], "argument": name, "reference": value, "decoy": alt}


def _replay(pool: ToolEnvironments, record: TaskRecord, variant: Variant, loop_config: LoopConfig) -> Episode:
    policy = ScriptedPolicy({(record.scenario, record.task_idx): variant.turns()}, name="decoy-check")
    return run_episode(pool, policy, EpisodeSpec(record.scenario, record.task_idx, record.task), loop_config)


def build_decoys(pool: ToolEnvironments, judge: Judge, record: TaskRecord, solution: dict[str, Any], *,
                 decoys: int, loop_config: LoopConfig, max_candidates: int = 12) -> TaskDecoys | None:
    """The reference episode of `solution` (`{"calls", "final_answer"}`) and up to `decoys` decoys, each replayed
    through `pool` and judged by the task's verifier: kept when the episode ends with a final answer (well formed)
    and the verdict is not Completed. None when the reference itself does not complete the task (a reference
    that fails its verifier cannot anchor anything). Every kept episode's databases are discarded; the episodes
    (messages, steps) stay on the variants for the warm start's samples."""
    reference = Variant(calls=solution["calls"], final_answer=solution.get("final_answer"))
    episode = _replay(pool, record, reference, loop_config)
    verdict = judge.judge(episode, record) if episode.termination == "final_answer" else None
    discard_snapshot(episode)
    if verdict is None or verdict.classification != "Completed":
        return None
    reference.episode, reference.classification = episode, verdict.classification
    results = [s.tool.text if s.tool else "" for s in episode.steps[1:1 + len(reference.calls)]]
    tools = scenario_tools(pool, record.scenario)
    out = TaskDecoys(record=record, reference=reference)
    for tried, (calls, change) in enumerate(candidate_changes(reference.calls, tools, results)):
        if len(out.decoys) >= decoys or tried >= max_candidates:
            break
        variant = Variant(calls=calls, final_answer=reference.final_answer, change=change)
        episode = _replay(pool, record, variant, loop_config)
        if episode.termination != "final_answer":
            discard_snapshot(episode)
            out.dropped.append({**change, "why": f"the episode ended with {episode.termination}: "
                                f"{episode.termination_detail}"})
            continue
        verdict = judge.judge(episode, record)
        discard_snapshot(episode)
        if verdict.classification in ("Completed", "Environment Error"):
            out.dropped.append({**change, "why": f"the verifier says {verdict.classification}"})
            continue
        variant.episode, variant.classification = episode, verdict.classification
        out.decoys.append(variant)
    return out
