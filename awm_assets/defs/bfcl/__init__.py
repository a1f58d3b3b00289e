"""BFCL: `bfcl_evaluation`, a policy on BFCL's categories scored by BFCL's own checkers."""

import dagster as dg

from awm_assets.defs.bfcl.bfcl_asset import bfcl_evaluation

defs = dg.Definitions(assets=[bfcl_evaluation])
