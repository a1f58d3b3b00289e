"""Fixtures for the training tests: a private copy of the imported corpus with a catalog file."""

from __future__ import annotations

import shutil

import pytest

TRAIN_SCENARIOS = ["fortnite_item_shop", "gofundme"]  # the two corpus environments with the shortest tool lists


@pytest.fixture(scope="session")
def training_store(corpus_store, tmp_path_factory):
    """A copy of `corpus_store` (training writes into its store) with `catalog.json` listing the ready
    environments, as the environment_catalog asset writes it (audit-free: the trainer audits itself)."""
    from awm_assets.synthesis.catalog import build_catalog
    from awm_resources.store import ArtifactStore, atomic_write_json

    root = tmp_path_factory.mktemp("training_store")
    shutil.copytree(corpus_store.root, root, dirs_exist_ok=True)
    store = ArtifactStore(root)
    (root / "catalog.json").unlink(missing_ok=True)
    entries = build_catalog(store)
    atomic_write_json(root / "catalog.json", {"environments": [e for e in entries if e["ready"]]})
    return store


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    from awm_rl.agent.tiny_model import build_tiny_qwen3

    _, tokenizer = build_tiny_qwen3(tmp_path_factory.mktemp("tiny_model"))
    return tokenizer
