"""The environment catalog: one entry per scenario in the store, with readiness. The RL side reads only this."""

from __future__ import annotations

import json
from typing import Any

from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore

AUDIT_FILE = "verifier_audit.json"  # written by awm_rl.reward.audit.write_audit


def catalog_entry(store: ArtifactStore, key: str) -> dict[str, Any]:
    sc = store.read_json(key, "scenario.json")
    status = {s: store.stage_status(key, s) or {} for s in PIPELINE_STAGES}
    present = store.present_stages(key)
    invalid = [s for s in PIPELINE_STAGES if s in present and status[s].get("valid") is False]
    ready = all(s in present for s in STAGES) and not invalid

    def stat(stage: str, field: str, default: int = 0):
        return status[stage].get(field, default)

    audit = store.path(key, AUDIT_FILE)
    excluded = sorted({e["task_idx"] for e in json.loads(audit.read_text())["entries"] if e["verdict"] != "ok"}) \
        if audit.is_file() else []
    n_tasks = stat("tasks", "tasks")
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
        "excluded_tasks": excluded,  # failed the do-nothing verifier audit: left out of training
        "trainable_tasks": max(n_tasks - len(excluded), 0) if audit.is_file() else None,
        "stages": present,
        "missing_stages": [s for s in STAGES if s not in present],
        "invalid_stages": invalid,
        "degraded_stages": [s for s in PIPELINE_STAGES if status[s].get("degraded")],
        "ready": ready,
        "path": str(store.scenario_dir(key)),
    }


def build_catalog(store: ArtifactStore) -> list[dict[str, Any]]:
    return [catalog_entry(store, key) for key in store.list_scenarios()]
