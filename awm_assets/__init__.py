"""The AWM synthesis DAG as Dagster assets; `awm_assets.definitions.defs` is the code location."""
