"""End to end through the real Dagster webserver and daemon: a seed file dropped into the watched folder is
picked up by the sensor, its scenarios are synthesized by daemon-launched runs, and the UI's GraphQL API
shows every scenario partition materialized and the catalog refreshed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


def test_sensor_driven_synthesis_in_dagster_dev(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    shutil.copy(PROJECT_ROOT / "seeds" / "demo.jsonl", seeds / "demo.jsonl")
    (seeds / "broken.jsonl").write_text('{"name": \n')  # must be reported, not crash the sensor
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AWM_HOME": str(tmp_path / "awm_home"),
           "AWM_SEED_DIR": str(seeds), "HF_HUB_OFFLINE": "1"}
    port = _free_port()
    log = open(tmp_path / "dev.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
                             "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 420
        runs: list = []
        while time.monotonic() < deadline:
            time.sleep(5)
            try:
                data = _graphql(port, "{ runsOrError { ... on Runs { results { jobName status } } } }")
            except OSError:
                continue
            runs = data["runsOrError"]["results"]
            done = [r for r in runs if r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS"]
            if len(done) == 3 and any(r["jobName"] == "refresh_catalog" and r["status"] == "SUCCESS" for r in runs):
                break
        assert not [r for r in runs if r["status"] == "FAILURE"], runs
        assert sum(r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS" for r in runs) == 3, runs
        nodes = _graphql(port, '{ assetNodes { assetKey { path } partitionKeys } }')["assetNodes"]
        parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
        assert parts["verifiers"] == ["issue_tracker", "music_playlists", "restaurant_reservations"]
        catalog = json.loads((tmp_path / "awm_home" / "catalog.json").read_text())
        assert len(catalog["environments"]) == 3
        assert "broken.jsonl" in (tmp_path / "dev.log").read_text()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
