"""The quality of stored environments: every tool probed, every task checked, and a batch summary.

`scenario_quality(store, scenario)` runs, for one scenario:
1. the env-code worker with the tool probe and the reference solutions (generated code runs only there), or
   what the synthesis stages ran on exactly this code and database (`check_results`: `reused` says what);
2. the verifiers in their sandbox: the do-nothing audit (`awm_rl.reward.audit`), each verifier twice
   on the solution's final database (or the unchanged one) for determinism, and the solution verdict;
3. write coverage (`coverage.py`).
A task is eligible for training unless its verifier is missing, crashes, passes vacuously, is not
deterministic, or the task is blocked (no tool can make its change) or unsolvable (its reference
solution fails). Without a reference solution a task stays eligible with solvability `unverified`.
The result is stored as `quality.json` in the scenario folder, keyed by the digest of what it checked.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.isolation.verification import VerifierJob, run_verifiers
from awm_rl.quality.check_results import CheckResults
from awm_rl.quality.coverage import blocked_reason, close_over_side_effects, static_writable_tables
from awm_rl.quality.dbfacts import read_facts
from awm_rl.quality.probe import BUG_STATUSES
from awm_rl.quality.proofs import PROOFS_FILE, agent_evidence, prove_episodes

# Stored results (results.py); names other modules import from here too.
from awm_rl.quality.results import (  # noqa: F401 - re-exported for the gate's callers
    CHECKED_FILES,
    INELIGIBLE,
    QUALITY_FILE,
    _by_digest,
    content_digest,
    file_stats,
    judge_label,
    stored_quality,
    summarize_batch,
    task_truth_counts,
)
from awm_rl.quality.solutions import broken_call, load_solutions, solution_feedback
from awm_rl.quality.task_links import apply_agent_evidence, apply_links, link_tasks
from awm_rl.reward.audit import audit_verifiers, write_audit
from awm_rl.reward.tasks import CODE_FUNCTION, SQL_FUNCTION, entry_mode, load_tasks


def _tool_summary(probe: dict[str, dict]) -> dict[str, Any]:
    counts = {s: sum(1 for t in probe.values() if t["status"] == s)
              for s in ("ok", "server_error", "server_error_on_edge", "client_error_only", "shadowed",
                        "writes_on_read", "suspicious_empty", "not_probed")}
    return {"tools_total": len(probe), "tools_ok": counts["ok"], "tools_server_error": counts["server_error"],
            "tools_server_error_on_edge": counts["server_error_on_edge"],
            "tools_client_error_only": counts["client_error_only"], "shadowed": counts["shadowed"],
            "writes_on_read": counts["writes_on_read"], "suspicious_empty": counts["suspicious_empty"],
            "not_probed": counts["not_probed"],
            "tools_with_bugs": sum(1 for t in probe.values() if t["status"] in BUG_STATUSES)}


def _verdict(outcome) -> Any:
    return outcome.verdict if outcome.function == CODE_FUNCTION else json.dumps(outcome.result, sort_keys=True,
                                                                                default=str)


def scenario_quality(store: ArtifactStore, scenario: str, *, timeout_s: float = 60.0,
                     verifier_timeout_s: float = 10.0, judge: Any | None = None) -> dict[str, Any]:
    """Probe and task checks of one stored scenario (see module docstring); also written to quality.json.
    With an LLM `judge` (`awm_rl.reward.judge.Judge` in llm or sql mode), a task is proven solvable only
    when the judge also classifies its reference solution's episode as Completed."""
    folder = store.scenario_dir(scenario)
    server, initial = folder / "server.py", folder / "initial.db"
    out: dict[str, Any] = {"scenario": scenario, "digest": content_digest(store, scenario), "judge": judge_label(judge),
                           "file_stats": file_stats(store, scenario)}
    if not server.is_file() or not initial.is_file():
        missing = [p.name for p in (server, initial) if not p.is_file()]
        return {**out, "error": f"cannot check: {', '.join(missing)} missing", "tools": {}, "tasks": [],
                **_tool_summary({}), **{k: 0 for k in INELIGIBLE}, "verifier_crash": 0, "eligible_tasks": 0}
    records = load_tasks(store, scenario) if (store.has(scenario, "tasks.json") or store.has(scenario, "verifiers.json")) else []
    entries = [v for r in records for v in r.verifiers]
    solutions = load_solutions(folder, entries)
    code = server.read_text(encoding="utf-8")
    kept = CheckResults(store, scenario, code, initial)
    with tempfile.TemporaryDirectory(prefix="awm-quality-") as tmp:
        probe, runs, error, out["reused"] = _env_runs(kept, code, initial, {k: v.model_dump() for k, v in
                                                                          solutions.items()}, timeout_s, Path(tmp))
        if probe is None:
            out["error"] = error or "the environment worker ended before the probe finished"
            probe = {}
        out.update(_tool_summary(probe))
        out["tools"] = {name: {"status": t["status"], "calls": t["calls"], "errors": t["errors"],
                               "writes": t["writes"], **({"note": t["note"]} if t.get("note") else {}),
                               **({"accepted": t["accepted"]} if t.get("accepted") else {}),
                               **({"shadowed_by": t["shadowed_by"]} if t.get("shadowed_by") else {})}
                        for name, t in probe.items()}
        facts = read_facts(initial)
        writable = close_over_side_effects(
            static_writable_tables(code, facts)
            | {t for r in probe.values() for t in r["writes"]}, facts)
        out["tasks"] = _task_checks(store, scenario, records, initial, runs, facts, writable, verifier_timeout_s)
        _with_diagnoses(out["tasks"], solutions)
        api_spec = store.read_json(scenario, "api_spec.json") if store.has(scenario, "api_spec.json") else None
        apply_links(out["tasks"], link_tasks([(r.task_idx, r.task) for r in records], probe, solutions, initial,
                                             api_spec), runs)
        if judge is not None:
            _judge_solutions(scenario, out["tasks"], records, runs, judge)
    kept.clear()
    return _with_agent_evidence(store, scenario, out)


def _with_agent_evidence(store: ArtifactStore, scenario: str, out: dict[str, Any]) -> dict[str, Any]:
    """The agents' evidence (`agent_proofs.json` on this code and database) applied to a result, its counts made
    and the result stored; a stored result takes evidence logged after it was checked without running anything."""
    apply_agent_evidence(out["tasks"], agent_evidence(store, scenario))
    out["agent_proofs_stat"] = _proofs_stat(store, scenario)
    for kind in INELIGIBLE:
        out[kind] = sum(1 for t in out["tasks"] if t["verdict"] == kind)
    out["verifier_crash"] = out["crash"]
    out["eligible_tasks"] = sum(1 for t in out["tasks"] if t["eligible"])
    out.update(task_truth_counts(out["tasks"]))
    atomic_write_json(store.path(scenario, QUALITY_FILE), out)
    atomic_write_json(_by_digest(store, out["digest"], out.get("judge")), out)
    return out


def _proofs_stat(store: ArtifactStore, scenario: str) -> list[int] | None:
    path = store.path(scenario, PROOFS_FILE)
    return [path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else None


def _env_runs(kept: CheckResults, code: str, initial: Path, solutions: dict[int, dict], timeout_s: float,
              snapshot_dir: Path) -> tuple[dict[str, dict] | None, dict[str, dict], str | None, dict[str, Any]]:
    """(probe, solution runs, error, what was reused) of the code on `initial`: what the synthesis stages already
    ran on exactly these inputs is taken from `kept`, the rest runs in the env-check worker (nothing at all when
    everything was kept)."""
    from awm_rl.quality.envcheck import check_env_code

    probe, runs = kept.probe(), kept.solution_runs(solutions)
    reused = {"probe": probe is not None, "solution_runs": len(runs)}
    missing = {k: v for k, v in solutions.items() if str(k) not in runs}
    if probe is not None and not missing:
        return probe, runs, None, reused
    check = check_env_code(code, initial, timeout_s=timeout_s, probe=probe is None, solutions=missing or None,
                           snapshot_dir=snapshot_dir)
    return (check.probe if probe is None else probe), {**runs, **(check.solutions or {})}, check.error, reused


def _task_checks(store: ArtifactStore, scenario: str, records, initial: Path, runs: dict[str, dict], facts,
                 writable: set[str], timeout_s: float) -> list[dict[str, Any]]:
    audit = {}
    entries = audit_verifiers(store, [scenario], timeout_s=timeout_s)
    write_audit(store, entries)  # the do-nothing audit's own file, for `awm audit` readers
    for entry in entries:
        if entry.verdict != "ok" or entry.task_idx not in audit:
            audit[entry.task_idx] = entry
    jobs, owners = [], []
    for record in records:
        run = runs.get(str(record.task_idx))
        final = Path(run["final_db"]) if run else initial
        start = Path(run["initial_db"]) if run else initial
        for entry in record.verifiers:
            mode = entry_mode(entry)
            if mode == "none":
                continue
            job = VerifierJob(code=entry["code"], initial_db=start, final_db=final,
                              function=CODE_FUNCTION if mode == "code" else SQL_FUNCTION,
                              final_answer=run.get("final_answer") if run else None)
            jobs += [job, job]  # twice: determinism
            owners += [record.task_idx, record.task_idx]
    outcomes = run_verifiers(jobs, timeout_s=timeout_s, workers=2) if jobs else []
    by_task: dict[int, list] = {}
    for idx, job, outcome in zip(owners, jobs, outcomes, strict=True):
        by_task.setdefault(idx, []).append((job, outcome))
    tasks = []
    for record in records:
        task = {"task_idx": record.task_idx, "eligible": True, "verdict": "ok", "reason": "",
                "solvable": "unverified"}
        pairs = by_task.get(record.task_idx, [])
        run = runs.get(str(record.task_idx))
        au = audit.get(record.task_idx)
        if au is not None and au.verdict != "ok":
            task.update(verdict=au.verdict, reason=au.detail)
        elif any(not o.ok for _, o in pairs):
            bad = next(o for _, o in pairs if not o.ok)
            task.update(verdict="crash", reason=f"{bad.error_kind}: {bad.error}")
        elif any(_verdict(pairs[i][1]) != _verdict(pairs[i + 1][1]) for i in range(0, len(pairs) - 1, 2)):
            task.update(verdict="nondeterministic", reason="two runs of the verifier on the same databases disagree")
        else:
            code_entry = record.verifier_for(CODE_FUNCTION)
            reason = blocked_reason(code_entry["code"], facts, writable) if code_entry else None
            if reason:
                task.update(verdict="blocked", reason=reason)
            if run is not None:
                task.update(_solvability(run, pairs, code_entry["code"] if code_entry else ""))
                if task["solvable"] == "no" and task["verdict"] == "ok":
                    task.update(verdict="unsolvable", reason=task["solution_detail"])
        task["eligible"] = task["verdict"] == "ok"
        tasks.append(task)
    return tasks


def _with_diagnoses(tasks: list[dict[str, Any]], solutions: dict[int, Any]) -> None:
    """An unsolvable task whose solution writer diagnosed the fault (`awm repair`) carries that diagnosis
    first in its reason, which the catalog and the UI show."""
    for task in tasks:
        sol = solutions.get(task["task_idx"])
        if task["verdict"] == "unsolvable" and sol is not None and sol.diagnosis:
            task["diagnosis"] = {"at_fault": sol.at_fault, "explanation": sol.diagnosis}
            task["reason"] = f"diagnosis ({sol.at_fault or 'unknown'} at fault): {sol.diagnosis} | {task['reason']}"


def _judge_solutions(scenario: str, tasks: list[dict[str, Any]], records, runs: dict[str, dict], judge) -> None:
    """The rollout judge on each proven reference solution: anything but Completed makes the task unsolvable."""
    from awm_rl.quality.solutions import solution_episode

    by_idx = {r.task_idx: r for r in records}
    proven = [t for t in tasks if t.get("solvable") == "yes" and str(t["task_idx"]) in runs]
    items = [(solution_episode(scenario, t["task_idx"], by_idx[t["task_idx"]].task, runs[str(t["task_idx"])]),
              by_idx[t["task_idx"]]) for t in proven]
    for task, verdict in zip(proven, judge.judge_many(items) if items else [], strict=True):
        task["judge"] = verdict.classification
        if verdict.classification != "Completed":
            detail = f"the verifier says complete but the {judge.mode} judge says {verdict.classification}: " \
                     f"{(verdict.reasons or verdict.judge_error or '')[:300]}"
            task.update(solvable="no", solution_detail=detail, verdict="unsolvable", reason=detail, eligible=False)


def _solvability(run: dict[str, Any], pairs: list, verifier_code: str) -> dict[str, Any]:
    """Did the reference solution run cleanly, and does the code-mode verifier call the result complete?
    If not, the detail says why (`solution_feedback`: calls and answers, the verifier's dict, changed rows)."""
    failed = broken_call(run)
    if failed is not None:
        i, call = failed
        return {"solvable": "no", "solution_detail": f"reference solution call {i + 1} ({call['tool']}) failed with "
                                                     f"HTTP {call['status']}: {call['error']}"}
    verdicts = [o.verdict for j, o in pairs if j.function == CODE_FUNCTION]
    if not verdicts:
        return {"solvable": "unverified", "solution_detail": "no code-mode verifier to judge the reference solution"}
    if all(v == "complete" for v in verdicts):
        return {"solvable": "yes", "solution_detail": f"{len(run['calls'])} call(s); the verifier says complete"}
    result = next((o.result for j, o in pairs if j.function == CODE_FUNCTION and o.verdict != "complete"), None)
    return {"solvable": "no", "solution_detail": solution_feedback(run, verifier_code, verdicts[0], result),
            "clean_run": all(c["status"] < 400 for c in run["calls"])}


def quality(store: ArtifactStore, scenarios: list[str] | None = None, *, reuse: bool = True,
            timeout_s: float = 60.0, judge: Any | None = None) -> dict[str, Any]:
    """`awm quality`: every (or the named) scenario's quality and the totals."""
    names = scenarios if scenarios is not None else [s for s in store.list_scenarios() if store.has(s, "server.py")]
    results = []
    for name in names:
        cached = stored_quality(store, name, judge) if reuse else None
        if cached is not None and cached.get("tasks") and cached.get("agent_proofs_stat") != _proofs_stat(store, name):
            cached = _with_agent_evidence(store, name, cached)  # agent episodes logged since it was checked
        results.append(cached or scenario_quality(store, name, timeout_s=timeout_s, judge=judge))
    return {"scenarios": results, "totals": summarize_batch(results)}


def prove_and_recheck(store: ArtifactStore, episodes: list[Any], *, run: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Agent episodes as proofs and evidence (`prove_episodes`), then the gate on the environments they touched,
    so its verdicts count the new proofs, blocked tasks and review items (`gate`: per environment, its counts)."""
    report = prove_episodes(store, episodes, run=run, timeout_s=timeout_s)
    gate = quality(store, sorted(report["environment_versions"]), timeout_s=timeout_s)
    report["gate"] = {s["scenario"]: {k: s.get(k) for k in ("eligible_tasks", "blocked", "goal_met", "blocked_by_tool",
                                                              "blocked_by_data", "share_blocked")}
                      for s in gate["scenarios"]}
    return report


def ineligible_tasks(store: ArtifactStore, scenarios: list[str]) -> dict[str, list[int]]:
    """Per scenario, the tasks training and evaluation leave out: the quality gate's verdicts where a
    current `quality.json` exists, else the do-nothing audit run now."""
    from awm_rl.reward.audit import excluded_tasks

    out: dict[str, list[int]] = {}
    unchecked = []
    for scenario in scenarios:
        stored = stored_quality(store, scenario)
        if stored is None:
            unchecked.append(scenario)
        elif bad := sorted(t["task_idx"] for t in stored.get("tasks", []) if not t["eligible"]):
            out[scenario] = bad
    if unchecked:
        out.update(excluded_tasks(audit_verifiers(store, unchecked)))
    return out
