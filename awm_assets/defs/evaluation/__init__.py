"""Evaluation: a policy's pass rate over the catalog (`evaluation`) and on τ²-bench (`tau2_evaluation`)."""

import dagster as dg

from awm_assets.defs.evaluation.evaluation_asset import evaluation
from awm_assets.defs.evaluation.tau2_asset import tau2_evaluation

defs = dg.Definitions(assets=[evaluation, tau2_evaluation])
