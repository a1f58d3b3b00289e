"""Dagster pieces several domains use: partitions, resources, executors, UI metadata tables."""
