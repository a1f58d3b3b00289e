"""Artifact store: atomic writes leave either the old or the new file, never a half-written one; the catalog's
index of the store re-reads only what changed and builds what a full rebuild builds."""

from __future__ import annotations

import os
import shutil

import pytest

from awm_resources.names import normalize_scenario_name
from awm_resources.store import ArtifactStore, atomic_path, atomic_write_text


@pytest.mark.parametrize("name, key", [
    ("DoorDash Drive (Delivery Tracking)", "doordash_drive_delivery_tracking"),
    ("Twitter/X", "twitter_x"), ("  Lowe's  ", "lowe_s"), ("e_commerce_33", "e_commerce_33"),
])
def test_normalize_scenario_name(name, key):
    assert normalize_scenario_name(name) == key


def test_normalize_rejects_empty():
    with pytest.raises(ValueError):
        normalize_scenario_name("!!!")


def test_failed_write_keeps_old_content_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "a" / "tasks.json"
    atomic_write_text(target, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["tasks.json"]


def test_atomic_path_only_appears_on_success(tmp_path):
    target = tmp_path / "initial.db"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("build failed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("complete")
    assert target.read_text() == "complete"


def test_store_layout_status_and_attempts(tmp_path):
    store = ArtifactStore(tmp_path)
    store.write_json("shop", "scenario.json", {"name": "Shop"})
    store.write_stage_status("shop", "tasks", {"tasks": 10, "valid": True})
    store.record_attempt("shop", "tasks", 1, {"error_rate": 1.0})
    store.record_attempt("shop", "tasks", 2, {"error_rate": 0.0})
    assert store.list_scenarios() == ["shop"]
    assert store.stage_status("shop", "tasks")["tasks"] == 10
    assert [a["attempt"] for a in store.list_attempts("shop", "tasks")] == [1, 2]
    assert store.present_stages("shop") == ["scenario"]
    with pytest.raises(ValueError):
        store.scenario_dir("Not A Key")
    with pytest.raises(FileNotFoundError, match="has no tasks.json"):
        store.read_json("shop", "tasks.json")


def test_incremental_catalog_equals_a_full_rebuild(corpus_dir, tmp_path, monkeypatch):
    from awm_assets.importing import check_imported
    from awm_assets.synthesis import catalog_index
    from awm_assets.synthesis.catalog import assemble_catalog, build_catalog
    from awm_assets.synthesis.statistics import synthesis_statistics
    from awm_resources.interop import import_awm_dir
    from benchmarks.scale import make_copies

    monkeypatch.setattr(catalog_index, "RACY_S", 0.0)  # trust files written before a refresh began (no waiting)
    store = ArtifactStore(tmp_path / "store")
    import_awm_dir(corpus_dir / "awm1k-sample", store)  # partial scenarios: no quality gate
    make_copies(corpus_dir / "generated", tmp_path / "one", 1)
    report = import_awm_dir(tmp_path / "one", store)
    assert check_imported(store, report, limit=0) is None  # a bigger import leaves the gate to the refresh
    (key,) = report.scenarios
    assert [r["scenario"] for r in check_imported(store, report)] == [key]  # checked at import

    first = assemble_catalog(store)
    assert first[1] == build_catalog(store) and [r["scenario"] for r in first[0]["scenarios"]] == [key]
    index = store.root / catalog_index.INDEX_FILE
    assemble_catalog(store)  # snapshots taken while the gate wrote are taken again once
    written = index.stat().st_mtime_ns
    assert assemble_catalog(store) == first and index.stat().st_mtime_ns == written  # nothing changed, nothing re-read

    store.write_stage_status(key, "env_code", {**store.stage_status(key, "env_code"), "valid": False})
    store.record_attempt("content_platform_1", "verifiers", 1, {"passed": False, "usage": {"cost_usd": 0.5}})
    store.path("code_hosting_2", "schema.sql").unlink()
    shutil.copytree(store.scenario_dir(key), store.scenario_dir("copy_of_it"))  # same content: result by digest
    incremental = assemble_catalog(store)
    index.unlink()
    assert incremental == assemble_catalog(store) and incremental[1] == build_catalog(store)
    assert not next(e for e in incremental[1] if e["name"] == key)["ready"]
    assert synthesis_statistics(store, catalog_index.statistics_records(store)[0]) == synthesis_statistics(store)


def test_a_refresh_with_nothing_changed_needs_no_run(corpus_dir, tmp_path):
    import dagster as dg

    from awm_assets.defs.catalog.catalog_asset import environment_catalog
    from awm_assets.defs.catalog.quality_assets import environment_quality
    from awm_assets.defs.catalog.statistics_asset import synthesis_statistics_asset
    from awm_assets.defs.shared.resources import LLMResource, StoreResource
    from awm_assets.synthesis.catalog import CATALOG_FILE, catalog_up_to_date
    from awm_resources.interop import import_awm_dir

    store = ArtifactStore(tmp_path / "store")
    import_awm_dir(corpus_dir / "awm1k-sample", store)  # partial scenarios: no quality gate to run
    for path in store.root.rglob("*"):  # written a minute ago, not within a clock tick of the snapshot
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    assert not catalog_up_to_date(store)
    resources = {"store": StoreResource(root=str(store.root)), "judge_llm": LLMResource(model="replay")}
    assert dg.materialize([environment_quality, environment_catalog, synthesis_statistics_asset],
                          resources=resources).success
    assert catalog_up_to_date(store)  # every file written from the store as it is: a run would write them again
    (store.root / CATALOG_FILE).rename(tmp_path / CATALOG_FILE)
    assert not catalog_up_to_date(store)
    (tmp_path / CATALOG_FILE).rename(store.root / CATALOG_FILE)
    assert catalog_up_to_date(store)
    store.record_attempt("content_platform_1", "verifiers", 1, {"passed": False})
    assert not catalog_up_to_date(store)
