"""Quality and catalog: the per-scenario quality gate check, `environment_quality`, `environment_catalog` and
`synthesis_statistics`, the `refresh_catalog` job and the automation that refreshes them once runs settle."""

import dagster as dg

from awm_assets.defs.catalog.automation import catalog_automation
from awm_assets.defs.catalog.catalog_asset import environment_catalog
from awm_assets.defs.catalog.jobs import catalog_job
from awm_assets.defs.catalog.quality_assets import environment_quality, environment_quality_gate
from awm_assets.defs.catalog.statistics_asset import synthesis_statistics_asset

defs = dg.Definitions(
    assets=[environment_quality, environment_catalog, synthesis_statistics_asset],
    asset_checks=[environment_quality_gate],
    jobs=[catalog_job],
    sensors=[catalog_automation],
)
