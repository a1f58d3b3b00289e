"""`awm bench serve --quick --json`: one small run of both sides; the report has every promised key.

No timed assertions: speed is what the benchmark reports, not what tests check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import make_scenario
from .test_bench_skips import UNCALLABLE_ENV

KEYS = ["instances", "cold_start_ms", "create_ms_p50", "reset_ms_p50", "call_ms_p50", "call_ms_p99",
        "throughput_calls_per_s", "rss_mb_total", "db_mb_total", "mb_per_instance"]


@pytest.mark.slow
def test_bench_serve_quick(corpus_store, tmp_path, ray_address):
    """Two corpus scenarios and one it cannot exercise (listed as skipped, left out of every measurement), on the
    session's Ray cluster."""
    home = tmp_path / "home"
    for key in ("rover", "gofundme"):
        shutil.copytree(corpus_store.scenario_dir(key), home / "scenarios" / key)
    make_scenario(home, "search_only", UNCALLABLE_ENV)
    awm = Path(sys.executable).with_name("awm")
    cmd = ([str(awm), "bench", "serve"] if awm.is_file()
           else [sys.executable, "-m", "benchmarks.serve"])
    out = tmp_path / "report.json"
    res = subprocess.run(cmd + ["--json", "--quick", "--scenarios", "rover", "gofundme", "search_only", "--home",
                                str(home), "--out", str(out)],
                         capture_output=True, text=True, timeout=420, env={**os.environ, "RAY_ADDRESS": ray_address})
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout)
    assert report == json.loads(out.read_text())
    for side in ("ours", "baseline"):
        for key in KEYS:
            assert report[side].get(key) is not None, (side, key)
    ours, base = report["ours"], report["baseline"]
    assert ours["host_call_ms_p50"] > 0 and ours["workload_ok_calls"] == ours["workload_calls"] > 0
    assert ours["isolation"]["ok"], ours["isolation"]["problems"]
    assert report["os_isolation"] == "bubblewrap" and report["seccomp"].startswith("seccomp:")
    assert report["limits"]["max_answer_bytes"] == 1 << 20 and report["limits"]["scratch"].startswith("scratch: /tmp")
    # memory per process: the host actors' sandboxed workers are in it, and PSS never exceeds RSS
    assert ours["memory_by_process"] and 0 < ours["pss_mb_total"] <= ours["rss_mb_total"]
    roles = {row["role"] for row in ours["memory_by_process"]}
    assert {"host actor", "scenario worker rover", "scenario worker gofundme"} <= roles, roles
    assert set(report["scenarios"]) == {"rover", "gofundme"}
    assert [s["scenario"] for s in report["skipped"]] == ["search_only"]
    assert "read-only tool" in report["skipped"][0]["reason"]
    assert set(ours["workload"]) == {"rover", "gofundme"}
    assert base["instances"] == 2 and "extrapolated" in base["note"]
    assert set(report["ratios"]) >= {"cold_start_ms", "reset_ms_p50", "call_ms_p50", "mb_per_instance"}
    assert set(report["targets"]) and isinstance(report["all_targets_met"], bool)
    # what an outside caller pays: awm serve with both MCP clients beside the pool, and verdicts on fresh episodes
    served = report["awm_serve"]
    assert "error" not in served, served
    assert served["scenario"] == "rover" and served["calls"] == 30
    for side in ("pool", "fastmcp", "mcp"):
        assert all(served[side][f"{kind}_ms_{q}"] > 0 for kind in ("call", "reset") for q in ("p50", "p99")), side
    assert set(served["over_pool_ms_p50"]) == {"fastmcp_call", "fastmcp_reset", "mcp_call", "mcp_reset"}
    verdict = report["verification"]
    assert verdict["isolation"] == "bubblewrap" and verdict["verify_ms_p50"] > 0 and verdict["fresh_sandbox_ms_p50"] > 0
    assert sum(verdict["outcomes"].values()) == verdict["verdicts"] + verdict["fresh_sandbox_verdicts"] == 15
    assert not [kind for kind in verdict["outcomes"] if kind.startswith("error")], verdict["outcomes"]
    assert verdict["sandboxes_started"] <= 1  # every warm verdict after the first reused one sandbox
    assert {"awm_serve_within_2ms_of_pool", "verify_ms_p50_le_30"} <= set(report["targets"])


def test_bench_rejects_unknown_scenario(corpus_store):
    res = subprocess.run([sys.executable, "-m", "benchmarks.serve", "--quick",
                          "--scenarios", "atlantis", "--home", str(corpus_store.root)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "atlantis" in res.stderr
