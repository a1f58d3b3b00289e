"""`environment_catalog`: every scenario with its statistics and readiness; the RL side reads only this."""


import dagster as dg

from awm_resources.store import PIPELINE_STAGES, STAGES, atomic_write_json
from awm_assets.resources import StoreResource

from awm_assets.synthesis.catalog import build_catalog

CATALOG_FILE = "catalog.json"


@dg.asset(
    deps=[dg.AssetDep(stage, partition_mapping=dg.AllPartitionMapping()) for stage in PIPELINE_STAGES],
    group_name="catalog",
    kinds={"json"},
    description="Ready environments (all stages present, blocking checks passed) with their statistics; tasks "
                "whose verifier passes vacuously or crashes on the unchanged database are excluded from training.",
)
def environment_catalog(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.reward.audit import audit_verifiers, summarize, write_audit

    st = store.get_store()
    complete = [k for k in st.list_scenarios() if set(STAGES) <= set(st.present_stages(k))]
    audit = audit_verifiers(st, complete)  # the do-nothing agent, in the verifier sandbox
    write_audit(st, audit)
    audit_summary = summarize(audit)
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
        "verifier_audit": dg.MetadataValue.json({k: v for k, v in audit_summary.items()}),
        "catalog_file": dg.MetadataValue.path(str(path)),
        "environments": dg.MetadataValue.md("\n".join(rows)),
    })
