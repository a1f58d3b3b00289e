"""Stored quality results: what a result is keyed by (the stats and the digest of the files the gate
checked, the judge that confirmed it), how a stored one is found again, and how a batch of results is summed.

Apart from `report` (which runs the gate) so that readers of stored results, such as the catalog's refresh,
load none of the gate's modules (the agent loop, the verifier sandbox) when nothing is to be checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from awm_resources.documents import QUALITY_FILE
from awm_resources.provenance import ENVIRONMENT_FILES, environment_digest
from awm_resources.store import ArtifactStore, atomic_write_json

# What the gate checks is what an environment's version covers: equal digests, equal results.
CHECKED_FILES = ENVIRONMENT_FILES
content_digest = environment_digest
# Task verdicts that leave a task out of training, in the order they are reported.
INELIGIBLE = ("missing", "crash", "vacuous", "nondeterministic", "goal_met", "blocked", "unsolvable")
PAPER_SHARE_BLOCKED = 0.14  # AWM (arXiv 2602.10090): share of tasks blocked by environment bugs


def task_truth_counts(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """One environment's (or a batch's) tasks by what stands in their way (`task_links.apply_links`): blocked by a
    tool, by data, by writes no tool makes; goal already met; proofs over the turn limit; literals the tool
    listing gives away."""
    n = len(tasks)
    blocked = sum(1 for t in tasks if t.get("verdict") == "blocked")
    return {
        **{f"blocked_by_{k}": sum(1 for t in tasks if t.get("verdict") == "blocked" and t.get("blocked_by") == k)
           for k in ("tool", "data", "writes")},
        "share_blocked": round(blocked / n, 4) if n else 0.0,
        "share_goal_met": round(sum(1 for t in tasks if t.get("verdict") == "goal_met") / n, 4) if n else 0.0,
        "proofs_over_turn_limit": sum(1 for t in tasks if t.get("over_turn_limit")),
        "tasks_with_answers_in_tools": sum(1 for t in tasks if t.get("answers_in_tools")),
    }


def file_stats(store: ArtifactStore, scenario: str) -> list:
    """(name, size, mtime_ns) of every checked file: when these are unchanged, so is the digest (no hashing)."""
    out = []
    for name in CHECKED_FILES:
        try:
            st = store.path(scenario, name).stat()
            out.append([name, st.st_size, st.st_mtime_ns])
        except FileNotFoundError:
            out.append([name, None, None])
    return out


def judge_label(judge: Any | None) -> str | None:
    """How a result records the judge that confirmed it (None: the code-mode verifier alone)."""
    return f"{judge.mode}:{getattr(judge.llm, 'model', '')}" if judge is not None else None


def summarize_batch(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch in the paper's terms: share of environments with bugs, bugs per environment, blocked tasks."""
    n = len(results)
    tasks = [t for r in results for t in r.get("tasks", [])]
    with_bugs = [r for r in results if r.get("tools_with_bugs")]
    return {
        "environments": n,
        "environments_with_bugs": len(with_bugs),
        "share_with_bugs": round(len(with_bugs) / n, 4) if n else 0.0,
        "bugs_per_environment": round(sum(r.get("tools_with_bugs", 0) for r in results) / n, 3) if n else 0.0,
        "tools_total": sum(r.get("tools_total", 0) for r in results),
        "tools_ok": sum(r.get("tools_ok", 0) for r in results),
        "tools_server_error": sum(r.get("tools_server_error", 0) for r in results),
        "tools_server_error_on_edge": sum(r.get("tools_server_error_on_edge", 0) for r in results),
        "tools_client_error_only": sum(r.get("tools_client_error_only", 0) for r in results),
        "environments_with_server_errors": sum(1 for r in results if r.get("tools_server_error")),
        "tasks": len(tasks),
        "tasks_eligible": sum(1 for t in tasks if t["eligible"]),
        **{k: sum(1 for t in tasks if t["verdict"] == k) for k in INELIGIBLE},
        "solvable_yes": sum(1 for t in tasks if t.get("solvable") == "yes"),
        **task_truth_counts(tasks),
        "paper_share_blocked": PAPER_SHARE_BLOCKED,
    }


def _by_digest(store: ArtifactStore, digest: str, judge_label: str | None) -> Path:
    """Results by content: a scenario whose files equal an already checked one (a copy under another name,
    a re-import) takes its result without running generated code again."""
    suffix = "" if judge_label is None else "." + hashlib.sha256(judge_label.encode()).hexdigest()[:8]
    return store.root / "quality_by_digest" / f"{digest}{suffix}.json"


def stored_quality(store: ArtifactStore, scenario: str, judge: Any | None = None) -> dict[str, Any] | None:
    """The stored result if it still matches the scenario's files (else None: run it again); with a
    judge, only a result that the same judge confirmed. A result for identical content checked under
    another name is taken over (and stored for this scenario)."""
    path = store.path(scenario, QUALITY_FILE)
    stats = file_stats(store, scenario)
    data: dict[str, Any] | None = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if data is not None and judge is not None and data.get("judge") != judge_label(judge):
        data = None  # another judge's verdict (or none): check again
    if data is not None and data.get("file_stats") == stats:
        return data  # nothing checked was touched since: no need to hash the files again
    digest = content_digest(store, scenario)
    if data is not None and data.get("digest") == digest:  # touched, not changed: remember the new stats
        data["file_stats"] = stats
        atomic_write_json(path, data)
        return data
    shared = _by_digest(store, digest, judge_label(judge))
    if not shared.is_file():
        return None
    data = {**json.loads(shared.read_text(encoding="utf-8")), "scenario": scenario, "file_stats": stats}
    atomic_write_json(path, data)
    return data
