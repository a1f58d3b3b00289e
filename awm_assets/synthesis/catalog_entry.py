"""One scenario's catalog entry (its stages, readiness and quality verdicts), read from the store. Apart from
catalog.py so that the incremental index (catalog_index.py), which catalog.py uses, can build entries without
importing it back."""

from __future__ import annotations

import json
from typing import Any

from awm_resources.documents import AUDIT_FILE, QUALITY_FILE
from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore


def catalog_entry(store: ArtifactStore, key: str, quality_result: dict[str, Any] | None = None) -> dict[str, Any]:
    sc = store.read_json(key, "scenario.json")
    status = {s: store.stage_status(key, s) or {} for s in PIPELINE_STAGES}
    present = store.present_stages(key)
    invalid = [s for s in PIPELINE_STAGES if s in present and status[s].get("valid") is False]
    ready = all(s in present for s in STAGES) and not invalid

    def stat(stage: str, field: str, default: int = 0):
        return status[stage].get(field, default)

    n_tasks = stat("tasks", "tasks")
    quality = store.path(key, QUALITY_FILE)
    audit = store.path(key, AUDIT_FILE)
    checked = quality_result is not None or quality.is_file() or audit.is_file()
    digest = None  # the environment's version: the digest of the files the gate checked (awm_resources.provenance)
    if quality_result is not None or quality.is_file():  # the quality gate: every task with its verdict and reason
        q = quality_result if quality_result is not None else json.loads(quality.read_text(encoding="utf-8"))
        digest = q.get("digest")
        ineligible = {t["task_idx"]: f"{t['verdict']}: {t['reason']}" for t in q.get("tasks", []) if not t["eligible"]}
        tool_quality = {k: q.get(k, 0) for k in ("tools_total", "tools_ok", "tools_server_error",
                                                  "tools_server_error_on_edge", "tools_client_error_only", "shadowed")}
        # why tasks are out (awm_rl.quality.task_links): a broken tool, a missing row, the goal already met
        task_truth = {k: q.get(k, 0) for k in ("blocked_by_tool", "blocked_by_data", "blocked_by_writes", "goal_met")}
    else:
        ineligible = {e["task_idx"]: f"{e['verdict']}: {e['detail']}" for e in json.loads(audit.read_text())["entries"]
                      if e["verdict"] != "ok"} if audit.is_file() else {}
        tool_quality, task_truth = {}, {}
    excluded = sorted(ineligible)
    return {
        "name": key,
        "display_name": sc.get("name") or key,
        "category": sc.get("category"),
        "source": sc.get("source", "synthesized"),
        "seed_batch": sc.get("seed_batch"),
        "tasks": stat("tasks", "tasks"),
        "tables": stat("db_schema", "tables"),
        "sample_rows": stat("sample_data", "sample_rows"),
        "tools": stat("env_code", "tools"),
        "lines_of_code": stat("env_code", "lines_of_code"),
        "verifiers": stat("verifiers", "verifiers"),
        "excluded_tasks": excluded,  # failed the quality gate (or the do-nothing audit): left out of training
        "excluded_reasons": {str(k): v for k, v in sorted(ineligible.items())},
        "trainable_tasks": max(n_tasks - len(excluded), 0) if checked else None,
        "tool_quality": tool_quality,
        "task_truth": task_truth,
        "stages": present,
        "missing_stages": [s for s in STAGES if s not in present],
        "invalid_stages": invalid,
        "degraded_stages": [s for s in PIPELINE_STAGES if status[s].get("degraded")],
        "ready": ready,
        "path": str(store.scenario_dir(key)),
        "digest": digest,
    }
