"""`environment_catalog`: every scenario with its statistics and readiness; the RL side reads only this."""


import dagster as dg

from awm_resources.store import PIPELINE_STAGES, atomic_write_json
from awm_assets.quality_assets import complete_scenarios
from awm_assets.resources import StoreResource

from awm_assets.synthesis.catalog import build_catalog

CATALOG_FILE = "catalog.json"


@dg.asset(
    deps=[*(dg.AssetDep(stage, partition_mapping=dg.AllPartitionMapping()) for stage in PIPELINE_STAGES),
          "environment_quality"],
    group_name="catalog",
    kinds={"json"},
    description="Ready environments (all stages present, blocking checks passed) with their statistics; tasks the "
                "quality gate finds ineligible (vacuous, crashing, nondeterministic verifier; blocked or unsolvable "
                "task) are excluded from training and evaluation, each with its reason.",
)
def environment_catalog(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.quality.report import quality

    st = store.get_store()
    # The quality gate (tool probe, task checks incl. the do-nothing audit); stored results whose
    # digest still matches are reused, so this re-checks only what changed since environment_quality.
    totals = quality(st, complete_scenarios(st))["totals"]
    entries = build_catalog(st)
    ready = [e for e in entries if e["ready"]]
    path = st.root / CATALOG_FILE
    atomic_write_json(path, {"environments": ready, "not_ready": [e for e in entries if not e["ready"]]})
    rows = ["| environment | source | tasks | tables | rows | tools | LoC | verifiers | ready |", "|---|---|---|---|---|---|---|---|---|"]
    rows += [f"| {e['name']} | {e['source']} | {e['tasks']} | {e['tables']} | {e['sample_rows']} | {e['tools']} | "
             f"{e['lines_of_code']} | {e['verifiers']} | {'yes' if e['ready'] else 'no: ' + ', '.join(e['missing_stages'] + e['invalid_stages'])} |"
             for e in entries]
    context.log.info(f"{len(ready)} of {len(entries)} environments ready")
    return dg.MaterializeResult(metadata={
        "ready": len(ready),
        "scenarios": len(entries),
        "tasks": sum(e["tasks"] for e in ready),
        "tools": sum(e["tools"] for e in ready),
        "trainable_tasks": sum(e["trainable_tasks"] or 0 for e in ready),
        "excluded_tasks": totals["tasks"] - totals["tasks_eligible"],
        "quality": dg.MetadataValue.json({k: totals[k] for k in ("vacuous", "crash", "missing", "nondeterministic",
                                                                 "blocked", "unsolvable", "tools_server_error")}),
        "catalog_file": dg.MetadataValue.path(str(path)),
        "environments": dg.MetadataValue.md("\n".join(rows)),
    })
