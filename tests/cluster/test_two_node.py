"""Cluster mode on the two-node Ray cluster of tests/cluster/conftest.py (started on this machine, shared by
every test here): a head node and a worker node, each with its own resources ({head_node: 1} / {worker_node: 1}).
The demo batch's scenario generation and one scenario's
stages (issue_tracker: both of its self-corrections included; each step job costs a Python start on the 2 shared
cores, so one scenario proves the path at a third of the time) run as Ray jobs through dagster-ray's executor
(AWM_EXECUTOR=ray), every node reading and writing the same artifact store and
Dagster instance (here one machine's folders stand in for the shared filesystem), then environment
instances are served from host actors placed on the worker node, their snapshots written to the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import dagster as dg
import pytest

from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow

DEMO_SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
ON_CLUSTER = ["issue_tracker"]


@pytest.fixture(scope="module")
def cluster_run(two_node_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")  # the "shared filesystem"
    env = {**os.environ, "AWM_EXECUTOR": "ray", "AWM_RAY_JOBS_ADDRESS": two_node_cluster["jobs_address"],
           "RAY_ADDRESS": two_node_cluster["address"], "AWM_HOME": str(root / "awm_home"),
           "DAGSTER_HOME": str(root / "dagster_home"), "AWM_LLM_MODEL": "replay", "HF_HUB_OFFLINE": "1",
           "RAY_AUTH_MODE": "disabled", "AWM_RAY_STEP_CPUS": "1"}
    (root / "dagster_home").mkdir()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tests.cluster.drive", str(PROJECT_ROOT / "seeds" / "demo.jsonl"),
                           *ON_CLUSTER],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - t0
    (root / "drive.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DRIVE-RESULT ")), None)
    assert proc.returncode == 0 and line, f"driver failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    result = json.loads(line.removeprefix("DRIVE-RESULT "))
    print(f"\n[two-node cluster] driver {seconds:.0f} s: {result['seconds']}")
    return {"root": root, "result": result, "env": env, **two_node_cluster}


def test_demo_batch_stages_run_as_ray_jobs(cluster_run):
    from ray.job_submission import JobStatus, JobSubmissionClient

    result = cluster_run["result"]
    assert result["scenarios"] == DEMO_SCENARIOS and result["synthesized"] == ON_CLUSTER
    assert all(r["success"] for r in result["runs"].values()), result["runs"]
    store = ArtifactStore(cluster_run["root"] / "awm_home")
    for key in ON_CLUSTER:
        assert set(STAGES) <= set(store.present_stages(key)), key
    catalog = json.loads((store.root / "catalog.json").read_text())
    assert sorted(e["name"] for e in catalog["environments"]) == ON_CLUSTER

    # Every step of every run was a Ray job (dagster-ray's submission ids), all succeeded, on the cluster's nodes.
    jobs = [j for j in JobSubmissionClient(cluster_run["jobs_address"]).list_jobs()
            if (j.submission_id or "").startswith("dagster-step-")]
    per_run = {}
    for j in jobs:
        per_run.setdefault(j.metadata.get("dagster/run-id"), []).append(j.metadata.get("dagster/op"))
    runs = result["runs"]
    for key in ON_CLUSTER:  # the six stages and the quality gate; a self-correcting retry is one more job
        assert set(per_run[runs[key]["run_id"]]) == {*PIPELINE_STAGES, "verifiers_environment_quality_gate"}, key
    assert set(per_run[runs["generate_scenarios"]["run_id"]]) == {"scenario_generation"}
    assert set(per_run[runs["refresh_catalog"]["run_id"]]) == {"environment_quality", "environment_catalog",
                                                               "synthesis_statistics"}
    assert all(j.status == JobStatus.SUCCEEDED for j in jobs), [(j.submission_id, j.status) for j in jobs]
    serving = result["serving"]
    assert {j.driver_node_id for j in jobs} <= set(serving["worker_node_ids"] + serving["head_node_ids"])
    on_worker = sum(j.driver_node_id in serving["worker_node_ids"] for j in jobs)
    print(f"[two-node cluster] {len(jobs)} step jobs: {len(jobs) - on_worker} on the head, {on_worker} on the worker")

    # The Dagster instance on the shared filesystem holds the runs and the per-scenario checks.
    with dg.DagsterInstance.from_config(str(cluster_run["root"] / "dagster_home")) as instance:
        run = instance.get_run_by_id(runs["issue_tracker"]["run_id"])
        assert run.status == dg.DagsterRunStatus.SUCCESS
        records = instance.fetch_materializations(dg.AssetKey("verifiers"), limit=10).records
        assert sorted(r.partition_key for r in records) == ON_CLUSTER


def test_instances_served_from_hosts_on_the_worker_node(cluster_run):
    serving = cluster_run["result"]["serving"]
    assert len(serving["worker_node_ids"]) == 1 and len(serving["head_node_ids"]) == 1
    assert serving["host_nodes"] == serving["worker_node_ids"], serving
    assert serving["tools"] >= 15 and serving["call_ok"], serving
    # Snapshots are written by the host on its node into the shared store, where the caller reads them.
    store_root = str(cluster_run["root"] / "awm_home")
    assert serving["snapshot_final"].startswith(store_root) and serving["snapshot_bytes"] > 0, serving
