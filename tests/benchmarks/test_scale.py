"""`awm bench scale`: runs end to end on a small N and reports what the issue asks for, with ratios."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_bench_scale_small(capsys):
    from awm_assets.cli import main

    assert main(["bench", "scale", "--scenarios", "7", "--workers", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["imported"] == 7 and out["ready"] == 7 and out["ready_after_one_more"] == 8
    assert out["dagster_events"] == 7 * 6  # one materialization per stage and scenario
    assert out["import_per_scenario_vs_baseline"] > 0 and 0 < out["catalog_after_one_more_vs_full"] < 1
    assert out["peak_rss_mb"] > 0 and out["baseline"]["scenarios"] == 5


def test_bench_scale_rejects_bad_input(tmp_path, capsys):
    from awm_assets.cli import main

    assert main(["bench", "scale", "--corpus", str(tmp_path), "--scenarios", "3"]) == 2
    assert "not an AWM folder" in capsys.readouterr().err
