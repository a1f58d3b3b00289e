"""Dagster-free stage logic: prompts, parsing, execution checks, thresholds."""
