"""Runs of every domain: the watchdog that fails runs whose worker died with the daemon."""

import dagster as dg

from awm_assets.defs.runs.watchdog import run_worker_watchdog

defs = dg.Definitions(sensors=[run_worker_watchdog])
