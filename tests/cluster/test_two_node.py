"""Cluster mode on a two-node Ray cluster started on this machine: a head node and a worker node, each with
its own resources ({head_node: 1} / {worker_node: 1}). The demo batch's scenario generation and one scenario's
stages (issue_tracker: both of its self-corrections included; each step job costs a Python start on the 2 shared
cores, so one scenario proves the path at a third of the time) run as Ray jobs through dagster-ray's executor
(AWM_EXECUTOR=ray), every node reading and writing the same artifact store and
Dagster instance (here one machine's folders stand in for the shared filesystem), then environment
instances are served from host actors placed on the worker node, their snapshots written to the store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import dagster as dg
import pytest

from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow

DEMO_SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
ON_CLUSTER = ["issue_tracker"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_job_server(address: str, timeout_s: float = 180) -> None:
    """The job server and the nodes' dashboard agents come up after the nodes: one trivial job must succeed
    ("No available agent to submit job" until then)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    deadline = time.monotonic() + timeout_s
    last: Exception | str | None = None
    while time.monotonic() < deadline:
        try:
            client = JobSubmissionClient(address)
            job = client.submit_job(entrypoint="true")
            while time.monotonic() < deadline:
                status = client.get_job_status(job)
                if status == JobStatus.SUCCEEDED:
                    return
                if status in (JobStatus.FAILED, JobStatus.STOPPED):
                    last = f"probe job {status}: {client.get_job_logs(job)[-500:]}"
                    break
                time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
        time.sleep(1)
    pytest.fail(f"the Ray job server at {address} did not take a job: {last}")


@pytest.fixture(scope="module")
def two_node_cluster():
    """ray.cluster_utils.Cluster: both nodes are child processes of this test, stopped by shutdown() (never
    `ray stop`, which would end every Ray on the machine). Its own temp folder, and the address file written
    there, so a plain `ray.init()` elsewhere on this machine does not join this cluster."""
    import ray._private.utils as ray_utils
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="awm-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    write_address = ray_utils.write_ray_address
    ray_utils.write_ray_address = lambda address, _temp_dir=None: write_address(address, temp_dir)
    dashboard_port = _free_port()
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "resources": {"head_node": 1}, "temp_dir": temp_dir, "include_dashboard": True,
            "dashboard_host": "127.0.0.1", "dashboard_port": dashboard_port, "object_store_memory": 150 * 2**20,
            # Two nodes on one machine: each dashboard agent on its own port (the default one is shared, and
            # the job server needs the head's agent to take jobs).
            "dashboard_agent_listen_port": _free_port(), "metrics_export_port": _free_port()})
        cluster.add_node(num_cpus=2, resources={"worker_node": 1}, temp_dir=temp_dir,
                         object_store_memory=150 * 2**20, dashboard_agent_listen_port=_free_port(),
                         metrics_export_port=_free_port())
        cluster.wait_for_nodes()
    finally:
        ray_utils.write_ray_address = write_address
    jobs_address = f"http://127.0.0.1:{dashboard_port}"
    try:
        _wait_for_job_server(jobs_address)
    except BaseException:
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    try:
        yield {"address": cluster.address, "jobs_address": jobs_address}
    finally:
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


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
