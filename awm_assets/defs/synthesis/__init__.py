"""Synthesis: scenario generation per seed batch, the six stage assets per scenario with their checks, the
jobs that run them and the sensors that launch them for new seed batches and new scenarios."""

import dagster as dg

from awm_assets.defs.synthesis.jobs import generate_scenarios_job, synthesize_scenario_job
from awm_assets.defs.synthesis.scenario_assets import scenario_generation
from awm_assets.defs.synthesis.sensors import new_scenario_sensor, seed_batch_sensor
from awm_assets.defs.synthesis.stage_assets import build_stage_assets

defs = dg.Definitions(
    assets=[scenario_generation, *build_stage_assets()],
    jobs=[generate_scenarios_job, synthesize_scenario_job],
    sensors=[seed_batch_sensor, new_scenario_sensor],
)
