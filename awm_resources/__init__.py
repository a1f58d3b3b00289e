"""The shared core, importable without Dagster: LLM client, artifact store, embedder, Ray connection,
AWM interop, SQLite build, scenario names.

Layers go one way: `awm_rl` builds on this package and `awm_assets` (Dagster) on both; nothing here
imports Dagster, `awm_rl` or `awm_assets` (tests/test_layers.py enforces it). The Dagster resources
that wrap these clients live in `awm_assets.defs.shared.resources`.
"""
