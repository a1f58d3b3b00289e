"""The AWM synthesis DAG as Dagster assets; `awm_assets.definitions.defs` is the code location."""

import warnings

import dagster as dg

# Partitioned asset checks are a Dagster preview feature used deliberately: one check history per scenario.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)
