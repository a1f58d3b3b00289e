"""Fixtures for the rollout tests: the demo batch synthesized into a temp store, and runtime pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

SOLUTIONS = PROJECT_ROOT / "seeds" / "solutions"


@pytest.fixture(scope="session")
def demo_store(demo_pristine, tmp_path_factory):
    """The demo seed batch synthesized offline (replay LLM) through the real Dagster assets: a private copy of
    the run's synthesis (tests/conftest.py: demo_pristine), as it was right after synthesis."""
    import shutil

    from awm_resources.store import ArtifactStore

    root = tmp_path_factory.mktemp("rl_demo_store")
    shutil.copytree(demo_pristine, root, dirs_exist_ok=True)
    store = ArtifactStore(root)
    assert store.list_scenarios(), "the demo batch produced no scenarios"
    return store


def solution_files() -> list[Path]:
    return sorted(SOLUTIONS.glob("*.json"))
