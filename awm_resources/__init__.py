"""Dagster resources and the plain clients under them: LLM, artifact store, embedder, Ray, AWM interop."""
