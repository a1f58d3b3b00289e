"""The AWM synthesis DAG as Dagster assets: `awm_assets.definitions.defs` (the code location) merges the domains
of `awm_assets/defs/`; `awm_assets/synthesis/` is the plain stage logic they call, with no Dagster import."""

import warnings

# Partitioned asset checks are a Dagster preview feature used deliberately: one check history per scenario.
# Matched by message, so that importing this package (every `awm` command) does not import Dagster itself.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec")
