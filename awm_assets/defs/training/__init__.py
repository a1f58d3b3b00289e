"""Training: `grpo_training` (GRPO on the catalog through Ray), its job and its weekly schedule."""

import dagster as dg

from awm_assets.defs.training.jobs import training_job, training_schedule
from awm_assets.defs.training.training_asset import grpo_training

defs = dg.Definitions(assets=[grpo_training], jobs=[training_job], schedules=[training_schedule])
