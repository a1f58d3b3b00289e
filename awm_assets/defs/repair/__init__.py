"""Repair: the `repair_environment` job, the quality gate's findings fixed by the LLM per scenario partition."""

import dagster as dg

from awm_assets.defs.repair.repair_job import repair_environment

defs = dg.Definitions(jobs=[repair_environment])
