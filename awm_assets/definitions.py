"""The code location: every domain's definitions merged once, with the shared resources and executor.

The only module that imports every domain; only the in-process runner (awm_assets/inprocess.py) and the
workspace (workspace.yaml) import it."""

import dagster as dg

from awm_assets.defs import bfcl, catalog, evaluation, evolve, repair, runs, synthesis, training
from awm_assets.defs.shared.executors import default_executor
from awm_assets.defs.shared.resources import build_resources
from awm_resources.settings import load_time_values

defs = dg.Definitions.merge(
    synthesis.defs, catalog.defs, training.defs, evaluation.defs, evolve.defs, bfcl.defs, repair.defs, runs.defs,
    dg.Definitions(resources=build_resources(),
                   executor=default_executor(),  # forkserver multiprocess locally; dagster-ray's with AWM_EXECUTOR=ray
                   # Read once, here (executor, retries, sensor intervals): a change needs a reload of the location.
                   metadata={f"{name} (read at load)": value or "(unset)" for name, value in load_time_values().items()}),
)
