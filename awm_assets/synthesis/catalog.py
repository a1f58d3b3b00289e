"""The environment catalog: one entry per scenario in the store, with readiness. The RL side reads only this."""

from __future__ import annotations

import json
from typing import Any

from awm_resources.documents import AUDIT_FILE, CATALOG_FILE, QUALITY_FILE
from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore

QUALITY_SUMMARY_FILE = "quality_summary.json"  # written by the environment_quality asset
STATISTICS_FILE = "synthesis_statistics.json"  # written by the synthesis_statistics asset


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


def assemble_catalog(store: ArtifactStore, judge: Any | None = None,
                     refresh_id: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the catalog group builds: the quality gate's report over the complete scenarios (each result
    without its per-tool detail, which stays in the scenario's quality.json) and every entry. Incremental:
    only scenarios whose files changed since the last refresh are read again and, if complete, run through
    the gate (`catalog_index.refresh_index`; one snapshot per `refresh_id`); the entries equal
    `build_catalog`'s."""
    from awm_assets.synthesis.catalog_index import refresh_index
    from awm_rl.quality.results import summarize_batch

    snapshots = refresh_index(store, judge, refresh_id)
    results = [s["quality"] for s in snapshots.values() if s["complete"]]
    return {"scenarios": results, "totals": summarize_batch(results)}, [s["entry"] for s in snapshots.values()]


def build_catalog(store: ArtifactStore, quality_results: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every scenario's entry; `quality_results` (scenario -> result of the quality gate just run) saves
    reading each `quality.json` again."""
    results = quality_results or {}
    return [catalog_entry(store, key, results.get(key)) for key in store.list_scenarios()]


def written_catalog(store: ArtifactStore) -> list[dict[str, Any]]:
    """The entries `environment_catalog` last wrote (ready or not), in `build_catalog`'s order: after a
    refresh they are the store's entries, without reading every scenario again."""
    data = json.loads((store.root / CATALOG_FILE).read_text(encoding="utf-8"))
    return sorted(data["environments"] + data["not_ready"], key=lambda e: e["name"])


def catalog_up_to_date(store: ArtifactStore) -> bool:
    """Whether a refresh would write the catalog group's files again as they are: each was written from the
    store as it is now (`catalog_index.catalog_current`), the quality summary with the judge configured now.
    `awm catalog --refresh` then starts no run."""
    from awm_assets.synthesis.catalog_index import catalog_current
    from awm_resources.llm import REPLAY_MODEL
    from awm_resources.settings import judge_llm_config

    model = judge_llm_config().model
    judge = None if model in (None, "", REPLAY_MODEL) else f"sql:{model}"  # the gate's judge (gate_judge)
    return catalog_current(store, {QUALITY_SUMMARY_FILE: judge, CATALOG_FILE: None, STATISTICS_FILE: None})
