"""Fixtures for the rollout tests: the demo batch synthesized into a temp store, and runtime pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

DEMO_SEEDS = PROJECT_ROOT / "seeds" / "demo.jsonl"
RECORDINGS = PROJECT_ROOT / "seeds" / "recordings"
SOLUTIONS = PROJECT_ROOT / "seeds" / "solutions"


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory):
    """The demo seed batch synthesized offline (replay LLM) through the real Dagster assets."""
    import dagster as dg

    from awm_assets.catalog_asset import environment_catalog
    from awm_assets.resources import EmbedderResource, LLMResource, StoreResource, SynthesisSettings
    from awm_assets.scenario_assets import scenario_generation
    from awm_assets.sensors import batch_run_config
    from awm_assets.stage_assets import build_stage_assets
    from awm_assets.synthesis.seeds import read_seed_batch
    from awm_resources.store import ArtifactStore

    root = tmp_path_factory.mktemp("rl_demo_store")
    resources = {"llm": LLMResource(model="replay", replay_dir=str(RECORDINGS)), "store": StoreResource(root=str(root)),
                 "embedder": EmbedderResource(), "synthesis": SynthesisSettings()}
    instance = dg.DagsterInstance.ephemeral()
    batch = read_seed_batch(DEMO_SEEDS)
    instance.add_dynamic_partitions("seed_batches", [batch.key])
    dg.materialize([scenario_generation], instance=instance, partition_key=batch.key, resources=resources,
                   run_config=batch_run_config(DEMO_SEEDS))
    for key in instance.get_dynamic_partitions("scenarios"):
        dg.materialize(build_stage_assets(), instance=instance, partition_key=key, resources=resources)
    dg.materialize([environment_catalog], instance=instance, resources=resources)
    instance.dispose()
    store = ArtifactStore(root)
    assert store.list_scenarios(), "the demo batch produced no scenarios"
    return store


def solution_files() -> list[Path]:
    return sorted(SOLUTIONS.glob("*.json"))
