"""`synthesis_statistics`: the paper's Table 1 for every seed batch and overall (thin; see synthesis.statistics)."""

import dagster as dg

from awm_assets.defs.catalog.automation import catalog_refresh_condition, every_stage_partition
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import records_table
from awm_assets.synthesis.catalog import STATISTICS_FILE
from awm_assets.synthesis.catalog_index import mark_written, statistics_records
from awm_assets.synthesis.statistics import synthesis_statistics
from awm_resources.store import atomic_write_json

COLUMNS = ["batch", "stage", "scenarios", "succeeded", "degraded", "failed", "imported", "success_rate", "mean_attempts",
           "llm_calls", "prompt_tokens", "completion_tokens", "cost_usd"]


@dg.asset(
    name="synthesis_statistics",
    deps=every_stage_partition(),
    automation_condition=catalog_refresh_condition(),
    group_name="catalog",
    kinds={"json"},
    description="Synthesis statistics as the paper's Table 1: per seed batch and stage the success rate, mean "
                "attempts, tokens and cost (error summaries included); cost per 100 ready environments.",
)
def synthesis_statistics_asset(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    st = store.get_store()
    records, token = statistics_records(st, context.run.run_id)  # from the catalog index where unchanged
    stats = synthesis_statistics(st, records)
    atomic_write_json(st.root / STATISTICS_FILE, stats)
    mark_written(st, STATISTICS_FILE, token)
    rows = [{"batch": b["batch"], **r} for b in [*stats["batches"], stats["overall"]] for r in b["stages"]]
    batches = [{"batch": b["batch"], "scenarios": b["scenarios"], "ready": b["ready"], "tokens": b["tokens"],
                "cost_usd": b["cost_usd"], "cost_per_100_environments_usd": b["cost_per_100_environments_usd"]}
               for b in [*stats["batches"], stats["overall"]]]
    overall = stats["overall"]
    context.log.info(f"{overall['ready']} ready environments, ${overall['cost_usd']:.4f} in all")
    return dg.MaterializeResult(metadata={
        "environments_ready": overall["ready"],
        "cost_usd": overall["cost_usd"],
        "cost_per_100_environments_usd": overall["cost_per_100_environments_usd"] or 0.0,
        "tokens": overall["tokens"],
        "per_batch": records_table(batches, ["batch", "scenarios", "ready", "tokens", "cost_usd",
                                             "cost_per_100_environments_usd"]),
        "per_stage": records_table(rows, COLUMNS),
        "statistics_file": dg.MetadataValue.path(str(st.root / STATISTICS_FILE)),
    })
