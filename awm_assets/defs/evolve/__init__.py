"""Evolve: what the evaluated policy fails at (`weaknesses`) turned into a seed batch aimed at it
(`targeted_seed_batch`), and the `evolve_round` job (evaluate -> weaknesses -> targeted batch)."""

import dagster as dg

from awm_assets.defs.evolve.jobs import evolve_round_job
from awm_assets.defs.evolve.targeted_batch_asset import targeted_seed_batch
from awm_assets.defs.evolve.weaknesses_asset import weaknesses

defs = dg.Definitions(assets=[weaknesses, targeted_seed_batch], jobs=[evolve_round_job])
