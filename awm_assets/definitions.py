"""The code location: every asset, job, sensor and resource, in one place."""

import dagster as dg

from awm_assets.bfcl_assets import bfcl_evaluation
from awm_assets.catalog_asset import environment_catalog
from awm_assets.cluster import default_executor
from awm_assets.evaluation import evaluation
from awm_assets.jobs import catalog_job, generate_scenarios_job, synthesize_scenario_job
from awm_assets.quality_assets import environment_quality, environment_quality_gate
from awm_assets.repair_job import repair_environment
from awm_assets.resources import build_resources
from awm_assets.scenario_assets import scenario_generation
from awm_assets.statistics_asset import synthesis_statistics_asset
from awm_assets.sensors import catalog_automation, new_scenario_sensor, run_worker_watchdog, seed_batch_sensor
from awm_assets.stage_assets import build_stage_assets
from awm_assets.tau2_assets import tau2_evaluation
from awm_assets.training import grpo_training, training_job, training_schedule

stage_assets = build_stage_assets()

defs = dg.Definitions(
    assets=[scenario_generation, *stage_assets, environment_quality, environment_catalog, synthesis_statistics_asset, evaluation, grpo_training,
            bfcl_evaluation, tau2_evaluation],
    asset_checks=[environment_quality_gate],
    jobs=[generate_scenarios_job, synthesize_scenario_job, catalog_job, repair_environment, training_job],
    schedules=[training_schedule],
    sensors=[seed_batch_sensor, new_scenario_sensor, catalog_automation, run_worker_watchdog],
    resources=build_resources(),
    executor=default_executor(),  # None locally (Dagster's default); dagster-ray's with AWM_EXECUTOR=ray
)
