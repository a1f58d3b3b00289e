"""`refresh_catalog`: the catalog group on demand (`awm catalog --refresh`, the UI), as its automation runs it."""

import dagster as dg

from awm_assets.defs.catalog.automation import CATALOG_ASSETS
from awm_assets.defs.shared.executors import job_executor

catalog_job = dg.define_asset_job(
    "refresh_catalog", selection=CATALOG_ASSETS, executor_def=job_executor(dg.in_process_executor),
    description="Run the quality gate where something changed, then rebuild the environment catalog and the "
                "synthesis statistics from the store.")
