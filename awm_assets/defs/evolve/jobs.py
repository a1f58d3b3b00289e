"""`evolve_round`: evaluate -> weaknesses -> targeted seed batch. The batch's file is where seed_batch_sensor
looks, so in the UI the round continues by itself: scenario generation, the six stages of the new scenarios
(new_scenario_sensor), the quality gate and the catalog (catalog automation); `awm evolve` runs those steps
in process (awm_assets.inprocess.evolve)."""

import dagster as dg

from awm_assets.defs.evolve.targeted_batch_asset import targeted_seed_batch
from awm_assets.defs.evolve.weaknesses_asset import weaknesses

evolve_round_job = dg.define_asset_job(
    "evolve_round", selection=dg.AssetSelection.assets("evaluation", weaknesses, targeted_seed_batch),
    description="One round of synthesis aimed at what the policy fails: evaluation, weaknesses, targeted seed "
                "batch (then the seed sensor, the stage backfill and the catalog refresh take it in).")
