"""`awm synth --json`: the same assets headless, into a persistent instance the UI can open afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow


def test_awm_synth_demo_batch_headless(tmp_path, monkeypatch):
    env = {**os.environ, "AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    cmd = [sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(PROJECT_ROOT / "seeds" / "demo.jsonl"), "--json"]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert sorted(report["new_scenarios"]) == ["issue_tracker", "music_playlists", "restaurant_reservations"]
    by_key = {s["scenario"]: s for s in report["scenarios"]}
    assert all(s["ready"] for s in by_key.values())
    assert by_key["issue_tracker"]["stages"]["db_schema"] == {"status": "ok", "attempts": 2, "error_rate": 0.0}
    assert by_key["music_playlists"]["stages"]["env_code"]["attempts"] == 2
    # Step DEBUG events stay in the instance, not on the terminal.
    assert "STEP_START" not in out.stderr
    # The runs are in the persistent instance the UI reads.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    with dg.DagsterInstance.get() as instance:
        assert sorted(instance.get_dynamic_partitions("scenarios")) == sorted(by_key)
        assert instance.get_latest_materialization_event(dg.AssetKey("environment_catalog")) is not None
        # ... under the project's job names, as if launched from the UI.
        jobs = {r.job_name for r in instance.get_runs()}
        assert {"generate_scenarios", "synthesize_scenario", "refresh_catalog"} <= jobs, jobs
        assert "__ephemeral_asset_job__" not in jobs
    # The catalog is rebuilt headless (what `awm train` reads), again as a refresh_catalog run.
    (tmp_path / "home" / "catalog.json").unlink()
    refreshed = subprocess.run([sys.executable, "-m", "awm_assets.cli", "catalog", "--refresh", "--json"], env=env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert refreshed.returncode == 0, refreshed.stderr[-3000:]
    assert sum(e["ready"] for e in json.loads(refreshed.stdout)) == 3
    assert (tmp_path / "home" / "catalog.json").is_file()
    # Running the same batch again synthesizes nothing new.
    again = json.loads(subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600).stdout)
    assert again["new_scenarios"] == [] and all(s["ready"] for s in again["scenarios"])


def test_awm_synth_rejects_a_malformed_seed_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "ok"}\nnot json\n')
    env = {**os.environ, "AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(bad)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "bad.jsonl:2: malformed JSON" in out.stderr
    assert not (tmp_path / "home" / "scenarios").exists()
