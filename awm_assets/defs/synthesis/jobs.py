"""Synthesis jobs: generate scenarios for a seed batch, synthesize one scenario."""

import dagster as dg

from awm_assets.defs.shared.executors import job_executor
from awm_resources.store import PIPELINE_STAGES

# Each job's executor: as listed here locally; dagster-ray's executor when AWM_EXECUTOR=ray (defs/shared/executors.py).

generate_scenarios_job = dg.define_asset_job(
    "generate_scenarios", selection=dg.AssetSelection.assets("scenario_generation"),
    executor_def=job_executor(dg.in_process_executor),
    description="Scenario generation for one seed batch.")

synthesize_scenario_job = dg.define_asset_job(
    "synthesize_scenario", selection=dg.AssetSelection.assets(*PIPELINE_STAGES),
    executor_def=job_executor(dg.in_process_executor),
    description="All six stages of one scenario, each self-correcting through retries.")
