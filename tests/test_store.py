"""Artifact store: atomic writes leave either the old or the new file, never a half-written one."""

from __future__ import annotations

import os

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
