"""Reference solutions: a task's tool-call sequence, run on a fresh instance to prove the task solvable.

A solution is `{"calls": [{"tool", "arguments"}], "final_answer": str | None}`, written by the LLM
with the task's verifier (synthesized environments) or for an imported environment by `awm repair`
(stored as `solutions.json` in the scenario folder). `run_solutions` runs inside the worker that
hosts the generated code; the verifiers then judge the database it leaves, in their own sandbox.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

SOLUTIONS_FILE = "solutions.json"  # an imported environment's solutions (the env-check worker imports this module)


class SolutionCall(BaseModel):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ReferenceSolution(BaseModel):
    """What the LLM writes for a task: the calls an agent would make, and what it would answer."""

    calls: list[SolutionCall] = Field(default_factory=list)
    final_answer: str | None = None
    # After a clean run the verifier did not accept: who the writer holds at fault, and why (`awm repair`).
    at_fault: Literal["solution", "verifier", "data"] | None = None
    diagnosis: str | None = None


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


TOOL_ANSWER_CHARS = 3000  # of each tool answer kept from a solution run and shown to a repair


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
                              "error": None if res.ok else (res.detail or res.text[:300]),
                              "text": res.text[:TOOL_ANSWER_CHARS], "text_chars": len(res.text)})
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


TABLE_REF = re.compile(r"""\b(?:FROM|JOIN|UPDATE|INTO)\s+["`\[]?([A-Za-z_][A-Za-z0-9_]*)""", re.I)


def tables_read(verifier_code: str, db_path: Path) -> list[str]:
    """The database's tables a verifier's SQL names (FROM/JOIN ...), in the database's order."""
    named = {m.group(1).lower() for m in TABLE_REF.finditer(verifier_code)}
    return [t for t in _tables(db_path) if t.lower() in named]


def _tables(db_path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE "
                                           "'sqlite_%' ORDER BY name")]
    finally:
        conn.close()


def _rows(db_path: Path, table: str, limit: int) -> tuple[list[str], dict[Any, tuple]]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        cur = conn.execute(f'SELECT rowid, * FROM "{table}" LIMIT {int(limit)}')
        return [d[0] for d in cur.description[1:]], {r[0]: r[1:] for r in cur}
    except sqlite3.Error:
        return [], {}
    finally:
        conn.close()


def changed_rows(initial: Path, final: Path, tables: list[str], *, per_table: int = 8,
                 scan_limit: int = 20_000) -> dict[str, dict[str, Any]]:
    """Per table, the rows an agent added, removed or changed (by rowid), at most `per_table` of each kind."""
    out: dict[str, dict[str, Any]] = {}
    for table in tables:
        cols, before = _rows(initial, table, scan_limit)
        cols_after, after = _rows(final, table, scan_limit)
        cols = cols_after or cols
        diff: dict[str, list[Any]] = {"added": [after[k] for k in after if k not in before],
                "removed": [before[k] for k in before if k not in after],
                "changed": [{"before": before[k], "after": after[k]} for k in after
                            if k in before and before[k] != after[k]]}
        if any(diff.values()):
            out[table] = {"columns": cols, **{kind: rows[:per_table] for kind, rows in diff.items() if rows},
                          **{f"{kind}_total": len(rows) for kind, rows in diff.items() if len(rows) > per_table}}
    return out


def _answer(call: dict[str, Any]) -> str:
    """A tool answer as the repair prompt shows it: whole up to TOOL_ANSWER_CHARS, else cut saying how much is
    left and how to read it (ids and totals guessed from a cut answer were the repairs' mistakes)."""
    text = call.get("text") or call.get("error") or ""
    total = max(int(call.get("text_chars") or 0), len(text))
    if total <= len(text):
        return text
    return (f"{text} ...(cut: {total - len(text)} of {total} characters not shown; to read them, call the tool "
            f"again with narrower arguments, e.g. a filter or a smaller page)")


def _cut(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ...(cut)"


def broken_call(run: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The first call of a solution run that no correct solution can contain: a 5xx, or an unknown tool
    (the quality gate then calls the task unsolvable whatever the verifier says)."""
    return next(((i, c) for i, c in enumerate(run["calls"]) if c["status"] >= 500 or c["status"] == 404
                 and c.get("error") and "Unknown tool" in str(c["error"])), None)


def solution_feedback(run: dict[str, Any], verifier_code: str, verdict: Any, result: dict | None) -> str:
    """Why a reference solution did not pass, for the next attempt's prompt: every call with its status and
    (cut) answer, the verifier's whole returned dict, and the changed rows of the tables the verifier reads."""
    calls = "\n".join(f"  {i + 1}. {c['tool']}({_cut(c.get('arguments', {}), 300)}) -> HTTP {c['status']}: "
                      f"{_answer(c)}" for i, c in enumerate(run["calls"]))
    initial, final = Path(run["initial_db"]), Path(run["final_db"])
    read = tables_read(verifier_code, final)
    changes = changed_rows(initial, final, read)
    clean = all(c["status"] < 400 for c in run["calls"])
    broken = broken_call(run)
    head = (f"reference solution call {broken[0] + 1} ({broken[1]['tool']}) failed with HTTP {broken[1]['status']}, "
            f"and verify_task_completion says {verdict!r}" if broken else
            f"after the reference solution ran on the environment, verify_task_completion says {verdict!r}, not "
            f"'complete'")
    return (f"{head}. The solution's calls ({'all answered 2xx' if clean else 'some failed'}):\n"
            f"{calls or '  (none)'}\nfinal_answer: {run.get('final_answer')!r}\n"
            f"The verifier returned: {_cut(result, 2000)}\n"
            f"Rows changed in the tables the verifier reads ({', '.join(read) or 'none found in its SQL'}): "
            f"{_cut(changes, 2500) if changes else 'none'}")
