"""`environment_catalog`: every scenario with its statistics and readiness; the RL side reads only this."""

import dagster as dg

from awm_assets.defs.catalog.automation import catalog_refresh_condition, every_stage_partition
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import asset_link, difficulty_table, records_table
from awm_assets.synthesis.catalog import CATALOG_FILE, assemble_catalog
from awm_assets.synthesis.catalog_index import mark_written, run_token
from awm_resources.provenance import save_catalog_version
from awm_resources.store import ArtifactStore, atomic_write_json


@dg.asset(
    deps=[*every_stage_partition(), "environment_quality"],
    automation_condition=catalog_refresh_condition(),
    group_name="catalog",
    kinds={"json"},
    description="Ready environments (all stages present, blocking checks passed) with their statistics; tasks the "
                "quality gate finds ineligible (vacuous, crashing, nondeterministic verifier; goal already met, blocked "
                "by a tool or data, or unsolvable task) are excluded from training and evaluation, each with its reason.",
)
def environment_catalog(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    st = store.get_store()
    # The snapshot environment_quality took in this run; alone, scenarios unchanged since the last refresh
    # come from the catalog's index and the others are read (and checked by the quality gate) again.
    report, entries = assemble_catalog(st, refresh_id=context.run.run_id)
    totals = report["totals"]
    ready = [e for e in entries if e["ready"]]
    path = st.root / CATALOG_FILE
    # Its version (digest of each ready environment's version) and a kept copy a run can train on later.
    digest, version_file = save_catalog_version(st, ready)
    atomic_write_json(path, {"digest": digest, "environments": ready, "not_ready": [e for e in entries if not e["ready"]]})
    mark_written(st, CATALOG_FILE, run_token(st, context.run.run_id))
    # Five narrow columns fit the metadata panel; each name opens the scenario's page.
    rows = ["| environment | ready | trainable tasks | tools ok | source |", "|---|---|---|---|---|"]
    for e in entries:
        tq = e.get("tool_quality") or {}
        tools = f"{tq['tools_ok']}/{tq['tools_total']}" if tq.get("tools_total") else str(e["tools"])
        trainable = e["tasks"] if e["trainable_tasks"] is None else e["trainable_tasks"]
        why = ", ".join(e["missing_stages"] + e["invalid_stages"])
        rows.append(f"| {asset_link('verifiers', e['name'])} | {'yes' if e['ready'] else 'no: ' + why} | "
                    f"{trainable}/{e['tasks']} | {tools} | {e['source']} |")
    excluded = [{"environment": e["name"], "task": int(k), "reason": why[:300]}
                for e in entries for k, why in e["excluded_reasons"].items()]
    context.log.info(f"{len(ready)} of {len(entries)} environments ready")
    difficulty = _task_difficulty(context, st, ready)
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata={
        "ready": len(ready),
        "scenarios": len(entries),
        "tasks": sum(e["tasks"] for e in ready),
        "tools": sum(e["tools"] for e in ready),
        "trainable_tasks": sum(e["trainable_tasks"] or 0 for e in ready),
        "excluded_tasks": totals["tasks"] - totals["tasks_eligible"],
        **{f"quality_{k}": totals.get(k, 0) for k in ("vacuous", "crash", "missing", "nondeterministic", "goal_met",
                                                      "blocked", "blocked_by_tool", "blocked_by_data", "unsolvable",
                                                      "tools_server_error")},
        "excluded_task_reasons": records_table(excluded, ["environment", "task", "reason"]),
        "catalog_file": dg.MetadataValue.path(str(path)),
        "catalog_digest": digest,  # also the data version: what grpo_training and evaluation record consuming
        "catalog_version_file": dg.MetadataValue.path(str(version_file)),
        "environment_versions": records_table([{"environment": e["name"], "version": e.get("digest") or "unchecked"}
                                               for e in ready], ["environment", "version"]),
        "environments": dg.MetadataValue.md("\n".join(rows)),
        **difficulty,
    })


def _task_difficulty(context: dg.AssetExecutionContext, st: ArtifactStore, ready: list[dict]) -> dict:
    """Each trainable task's pass rate and bucket by the policy recorded on it last (a new policy's evaluation is
    not averaged with an old one's; the others are named with their own rates: awm_resources.difficulty), the
    tasks per bucket so, and every policy's totals."""
    from awm_resources.difficulty import BUCKETS, latest_policy_view, load_difficulty, policy_summary

    index = load_difficulty(st)
    for problem in index.problems:
        context.log.warning(f"difficulty record left out: {problem}")
    keys = [(e["name"], i) for e in ready for i in range(e["tasks"]) if i not in set(e["excluded_tasks"])]
    rows = latest_policy_view(index, keys)
    counts = {bucket: sum(r["bucket"] == bucket for r in rows) for bucket in BUCKETS}
    return {"task_difficulty": difficulty_table(rows),
            "difficulty_buckets": records_table([{"bucket": k, "tasks": v, "meaning": BUCKETS[k]} for k, v in counts.items()],
                                                ["bucket", "tasks", "meaning"]),
            "difficulty_by_policy": records_table(policy_summary(index, keys), [
                "policy", "tasks", "attempts", "completed", "pass_rate", *(b for b in BUCKETS if b != "untried"),
                "last_recorded"]),
            "difficulty_records": len(index.parts)}
