"""`awm bench scale`: runs end to end on a small N and reports what the issue asks for, with ratios."""

from __future__ import annotations

import json

import pytest

from awm_resources.store import PIPELINE_STAGES

pytestmark = pytest.mark.slow


def test_bench_scale_small(capsys):
    from awm_assets.cli import main

    n = 2
    assert main(["bench", "scale", "--scenarios", str(n), "--workers", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # The internal functions.
    assert out["imported"] == n and out["ready"] == n and out["ready_after_one_more"] == n + 1
    assert out["dagster_events"] == n * 6  # one materialization per stage and scenario
    assert out["import_per_scenario_vs_baseline"] > 0 and 0 < out["catalog_after_one_more_vs_full"] < 1
    assert out["peak_rss_mb"] > 0 and out["baseline"]["scenarios"] == 5
    # The user's commands, timed as processes: real work, visible in the store, catalog.json and the instance.
    cmd = out["commands"]
    for run, scenarios in ((cmd["at_n"], n + 1), (cmd["baseline"], 5 + 1)):
        assert all(run[k] > cmd["cli_start_s"] > 0 for k in ("import_s", "catalog_refresh_s", "one_more_import_s",
                                                              "catalog_after_one_more_s"))
        held = run["held"]
        assert held["store_scenarios"] == held["catalog_ready"] == held["dagster_partitions"] == scenarios
        assert held["dagster_materializations"] == dict.fromkeys(PIPELINE_STAGES, scenarios)
        assert held["refresh_runs"] == ["SUCCESS", "SUCCESS"]
    assert cmd["baseline"]["scenarios"] == 5
    assert set(cmd["targets_at_1000"]) == {"import_s", "catalog_after_one_more_s"}
    assert all(t["met"] is None and t["measured_s"] > 0 for t in cmd["targets_at_1000"].values())  # N != 1000
    assert all(v > 0 for v in cmd["ratios"].values())


def test_bench_scale_rejects_bad_input(tmp_path, capsys):
    from awm_assets.cli import main

    assert main(["bench", "scale", "--corpus", str(tmp_path), "--scenarios", "3"]) == 2
    assert "not an AWM folder" in capsys.readouterr().err
