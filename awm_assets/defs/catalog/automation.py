"""When the catalog group refreshes itself: the condition its three assets carry, the sensor that evaluates it,
and the selection that both it and the `refresh_catalog` job target."""

import dagster as dg

from awm_assets.defs.shared.resources import sensor_interval_s
from awm_resources.store import PIPELINE_STAGES

# The catalog group, refreshed together: by the automation below and by the `refresh_catalog` job.
CATALOG_ASSETS = dg.AssetSelection.assets("environment_quality", "environment_catalog", "synthesis_statistics")


def every_stage_partition() -> list[dg.AssetDep]:
    """Every scenario partition of every synthesis stage: what the catalog-group assets summarize."""
    return [dg.AssetDep(stage, partition_mapping=dg.AllPartitionMapping()) for stage in PIPELINE_STAGES]


def catalog_refresh_condition() -> dg.AutomationCondition:
    """When `environment_quality`, `environment_catalog` and `synthesis_statistics` refresh themselves
    (evaluated by `catalog_automation` below).

    Not `AutomationCondition.eager()`: eager also requires `~any_deps_missing()`, and these assets read
    every scenario partition of the stages through `AllPartitionMapping`, so one scenario that is still
    being synthesized, gave up at a stage, or was imported without all stages keeps a dependency
    "missing" and eager never fires. Instead:

    - `any_deps_updated().since_last_handled()`: some stage of some scenario (or, for the catalog,
      `environment_quality`) materialized since this asset was last requested or materialized. Updates
      made by a run that also materializes this asset (the `refresh_catalog` job) do not count, and a
      dependency requested on the same tick does, so quality, catalog and statistics go in one run.
    - `~any_deps_in_progress()`: no run is materializing a stage right now, so a burst of scenario runs
      (a seed batch) costs one refresh when it settles, not one per scenario (the O(N^2) audits of the
      run-status sensor); a batch that runs for hours refreshes at its end, or on `awm catalog --refresh`.
    - `~in_progress()`: never two refreshes at once; updates that land during one trigger the next.

    Each refresh is incremental (quality results are reused by content digest), so firing late or once
    more than needed costs seconds, not a re-audit of the corpus.
    """
    return (dg.AutomationCondition.any_deps_updated().since_last_handled()
            & ~dg.AutomationCondition.any_deps_in_progress()
            & ~dg.AutomationCondition.in_progress()).with_label("catalog_refresh")


# One evaluation of the condition per tick for the whole group (a sensor per scenario run would re-audit the
# corpus once per scenario). Declared explicitly and RUNNING by default, so `dagster dev` refreshes the catalog with no toggle in the UI (the implicit default
# automation sensor starts stopped).
catalog_automation = dg.AutomationConditionSensorDefinition(
    "catalog_automation",
    target=CATALOG_ASSETS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=max(1, sensor_interval_s() // 2),
    description="Refreshes environment_quality, environment_catalog and synthesis_statistics once scenario "
                "runs have settled after any stage materialized (incremental: unchanged scenarios are not "
                "re-audited).",
)
