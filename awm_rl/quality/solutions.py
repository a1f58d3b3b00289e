"""Reference solutions: a task's tool-call sequence, run on a fresh instance to prove the task solvable.

A solution is `{"calls": [{"tool", "arguments"}], "final_answer": str | None}`, written by the LLM
with the task's verifier (synthesized environments) or for an imported environment by `awm repair`
(stored as `solutions.json` in the scenario folder). `run_solutions` runs inside the worker that
hosts the generated code; the verifiers then judge the database it leaves, in their own sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

SOLUTIONS_FILE = "solutions.json"


class SolutionCall(BaseModel):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ReferenceSolution(BaseModel):
    """What the LLM writes for a task: the calls an agent would make, and what it would answer."""

    calls: list[SolutionCall] = Field(default_factory=list)
    final_answer: str | None = None


def load_solutions(scenario_dir: Path, verifier_entries: list[dict[str, Any]]) -> dict[int, ReferenceSolution]:
    """task_idx -> solution: from the verifier entries (`reference_solution`), else `solutions.json`.

    A malformed solution is skipped (the task then counts as not proven solvable), never fatal.
    """
    found: dict[int, ReferenceSolution] = {}
    path = Path(scenario_dir) / SOLUTIONS_FILE
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        for item in data.get("tasks", []):
            try:
                found[int(item["task_idx"])] = ReferenceSolution.model_validate(item)
            except (KeyError, TypeError, ValueError, ValidationError):
                continue
    for entry in verifier_entries:
        raw = entry.get("reference_solution")
        if raw and isinstance(entry.get("task_idx"), int):
            try:
                found[entry["task_idx"]] = ReferenceSolution.model_validate(raw)
            except ValidationError:
                continue
    return found


def run_solutions(host: Any, solutions: dict[str, Any], out_dir: Path) -> dict[str, dict[str, Any]]:
    """Run each solution on a fresh instance of `host`; return per task its calls and database files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for idx, solution in solutions.items():
        sol = ReferenceSolution.model_validate(solution)
        iid = host.create_instance()
        try:
            calls = []
            for call in sol.calls:
                res = host.call_tool(iid, call.tool, call.arguments)
                calls.append({"tool": call.tool, "arguments": call.arguments, "status": res.status,
                              "error": None if res.ok else (res.detail or res.text[:300]), "text": res.text[:1500]})
            initial, final = host.snapshot(iid, out_dir)
            results[str(idx)] = {"calls": calls, "initial_db": str(initial), "final_db": str(final),
                                 "final_answer": sol.final_answer}
        finally:
            host.release(iid)
    return results


def solution_episode(scenario: str, task_idx: int, task: str, run: dict[str, Any]) -> Any:
    """A solution run as an `Episode`, so that the rollout judge can classify it like an agent's."""
    from awm_rl.agent.episode import Episode, Step, ToolOutcome

    steps = [Step(turn=i, response=f"call {c['tool']} with {json.dumps(c['arguments'], ensure_ascii=False)}",
                  format={"ok": True, "action": "call_tool", "tool_name": c["tool"], "arguments": c["arguments"]},
                  tool=ToolOutcome(ok=c["status"] < 400, status=c["status"], text=c.get("text") or c.get("error") or ""))
             for i, c in enumerate(run["calls"])]
    answer = run.get("final_answer")
    steps.append(Step(turn=len(steps), response=answer or "The task is done.", format={"ok": True, "action": "final_answer"}))
    return Episode(scenario=scenario, task_idx=task_idx, task=task, policy="reference_solution", window=None,
                   max_turns=len(steps), steps=steps, termination="final_answer", final_answer=answer,
                   initial_db=run["initial_db"], final_db=run["final_db"])
