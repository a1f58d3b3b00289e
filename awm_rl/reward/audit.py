"""Verifier audit (not in the paper): run every verifier as if the agent had done nothing.

Each verifier runs on the scenario's unchanged `initial.db` as both the initial and the final
database; a code-mode verifier runs once per probe answer in `PROBE_ANSWERS` (no answer, a
content-free one, and a blanket "nothing found" claim, which catches verifiers whose "empty
result" branch is what the seed data actually yields). Verdicts per entry:
- `ok`: code mode answers "others" for every probe; sql mode returns an evidence dict.
- `vacuous`: a code-mode verifier reports completion although nothing changed.
- `crash`: the verifier fails (exception, timeout, memory, forbidden import or operation, bad return).
- `missing`: the task has no verifier code (or no initial database to run it on).
Tasks with a vacuous, crashing or missing verifier are excluded from the training catalog
(`excluded_tasks`). Sql-mode evidence is not judged here (that needs the LLM judge).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from awm_resources.documents import AUDIT_FILE
from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.isolation.verification import VerifierJob, VerifierOutcome, run_verifiers
from awm_rl.reward.tasks import CODE_FUNCTION, SQL_FUNCTION, entry_mode, load_tasks

PROBE_ANSWERS: tuple[str | None, ...] = (
    None,
    "Done.",
    "Nothing found: there are no results, no matching records, no offers and no orders; the list is empty (none, zero).",
)


class AuditEntry(BaseModel):
    scenario: str
    task_idx: int
    mode: Literal["code", "sql", "none"]
    verdict: Literal["ok", "vacuous", "crash", "missing"]
    detail: str
    error_kind: str | None = None
    elapsed_ms: float = 0.0


def audit_verifiers(store: ArtifactStore, scenarios: list[str] | None = None, *, timeout_s: float = 10,
                    memory_mb: int = 512, workers: int = 2) -> list[AuditEntry]:
    """Audit every verifier entry of `scenarios` (default: all in the store), one entry per verifier."""
    entries: list[AuditEntry] = []
    jobs: list[VerifierJob] = []
    pending: list[AuditEntry] = []
    for scenario in scenarios if scenarios is not None else store.list_scenarios():
        initial = store.path(scenario, "initial.db")
        if not store.has(scenario, "tasks.json") and not store.has(scenario, "verifiers.json"):
            continue  # nothing to audit (a partial import without tasks or verifiers)
        records = load_tasks(store, scenario)
        for record in records:
            verifiers = [v for v in record.verifiers if v.get("code")]
            if not verifiers:
                entries.append(AuditEntry(scenario=scenario, task_idx=record.task_idx, mode="none", verdict="missing",
                                          detail="no verifier code stored for this task"))
                continue
            for verifier in verifiers:
                mode = entry_mode(verifier)
                entry = AuditEntry(scenario=scenario, task_idx=record.task_idx, mode=mode, verdict="missing", detail="")
                entries.append(entry)
                if mode == "none":
                    entry.detail = "verifier code defines neither verify_task_completion nor verify_task"
                    continue
                if not initial.is_file():
                    entry.detail = f"no initial database to audit against ({initial})"
                    continue
                probes = PROBE_ANSWERS if mode == "code" else (None,)
                for answer in probes:
                    jobs.append(VerifierJob(code=verifier["code"], initial_db=initial, final_db=initial,
                                            function=CODE_FUNCTION if mode == "code" else SQL_FUNCTION,
                                            final_answer=answer))
                    pending.append(entry)
    outcomes = run_verifiers(jobs, timeout_s=timeout_s, memory_mb=memory_mb, workers=workers)
    by_entry: dict[int, list[tuple[VerifierJob, VerifierOutcome]]] = {}
    for entry, job, outcome in zip(pending, jobs, outcomes, strict=True):
        by_entry.setdefault(id(entry), []).append((job, outcome))
    for entry in entries:
        runs = by_entry.get(id(entry))
        if runs:
            _classify(entry, runs)
    return entries


def _classify(entry: AuditEntry, runs: list[tuple[VerifierJob, VerifierOutcome]]) -> None:
    entry.elapsed_ms = round(max(o.elapsed_ms for _, o in runs), 2)
    crashed = [(j, o) for j, o in runs if not o.ok]
    if crashed:
        job, outcome = crashed[0]
        entry.verdict, entry.error_kind = "crash", outcome.error_kind
        entry.detail = f"{outcome.error_kind}: {outcome.error} (final_answer={job.final_answer!r})"
        return
    if entry.mode == "sql":
        keys = sorted(runs[0][1].result or {})
        entry.verdict = "ok"
        entry.detail = f"returns evidence with keys {keys[:12]}" + (" ..." if len(keys) > 12 else "")
        return
    passing = [(j.final_answer, o.result) for j, o in runs if o.verdict == "complete"]
    if passing:
        answer, result = passing[0]
        returned = json.dumps(result, ensure_ascii=False, default=str)
        entry.verdict = "vacuous"
        entry.detail = ("reports 'complete' on the unchanged initial database with final_answer="
                        f"{answer!r} (passes for an agent that does nothing); it returned: "
                        f"{returned if len(returned) <= 1500 else returned[:1500] + ' ...(cut)'}")
    else:
        entry.verdict = "ok"
        entry.detail = f"reports 'others' on the unchanged database for all {len(runs)} probe answers"


def excluded_tasks(entries: list[AuditEntry]) -> dict[str, list[int]]:
    """Per scenario, the tasks the training catalog must leave out (any entry not `ok`)."""
    out: dict[str, set[int]] = {}
    for entry in entries:
        if entry.verdict != "ok" and entry.task_idx >= 0:
            out.setdefault(entry.scenario, set()).add(entry.task_idx)
    return {k: sorted(v) for k, v in sorted(out.items())}


def summarize(entries: list[AuditEntry]) -> dict[str, Any]:
    """Counts for catalog metadata."""
    counts = {v: 0 for v in ("ok", "vacuous", "crash", "missing")}
    for entry in entries:
        counts[entry.verdict] += 1
    excluded = excluded_tasks(entries)
    return {"verifiers": len(entries), **counts, "excluded_tasks": sum(len(v) for v in excluded.values()),
            "excluded": excluded}


def write_audit(store: ArtifactStore, entries: list[AuditEntry]) -> list[Path]:
    """Store each scenario's audit as `<scenario>/verifier_audit.json` (atomic)."""
    by_scenario: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        by_scenario.setdefault(entry.scenario, []).append(entry)
    written = []
    for scenario, items in sorted(by_scenario.items()):
        path = store.path(scenario, AUDIT_FILE)
        atomic_write_json(path, {"entries": [json.loads(e.model_dump_json()) for e in items],
                                 "summary": {k: v for k, v in summarize(items).items() if k != "excluded"}})
        written.append(path)
    return written
