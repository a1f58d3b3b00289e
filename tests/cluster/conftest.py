"""One two-node Ray cluster on this machine for every test of tests/cluster/ (started once: about 20 s of the
2 shared cores): a head node ({head_node: 1}) and a worker node ({worker_node: 1, awm_runs: 2}: environment
hosts and step jobs are placed there by `worker_node`, whole Dagster runs by `awm_runs`, the custom resource
dagster.cluster.yaml's run launcher asks for)."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time

import psutil
import pytest


def free_port() -> int:
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


def add_worker_node(cluster, resources: dict[str, float], temp_dir: str):
    """A worker node of `cluster` (its own dashboard agent and metrics ports: several nodes on one machine)."""
    node = cluster.add_node(num_cpus=2, resources=resources, temp_dir=temp_dir,
                            object_store_memory=150 * 2**20, dashboard_agent_listen_port=free_port(),
                            metrics_export_port=free_port())
    cluster.wait_for_nodes()
    return node


def _kill_processes_under(temp_dir: str) -> None:
    """The processes of nodes that failed to start (Ray raises after spawning them, so no Cluster object can stop
    them): found by this cluster's own temp folder in their command line."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(temp_dir in part for part in proc.info["cmdline"] or []):
                proc.kill()
        except psutil.Error:
            continue


def _start_cluster(temp_dir: str, dashboard_port: int):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"head_node": 1}, "temp_dir": temp_dir, "include_dashboard": True,
        "dashboard_host": "127.0.0.1", "dashboard_port": dashboard_port, "object_store_memory": 150 * 2**20,
        # Two nodes on one machine: each dashboard agent on its own port (the default one is shared, and
        # the job server needs the head's agent to take jobs).
        "dashboard_agent_listen_port": free_port(), "metrics_export_port": free_port(),
        # The GCS checks its nodes every second (every 3 s by default): a killed node is noticed in about 5 s.
        "_system_config": {"health_check_period_ms": 1000}})
    try:
        worker = add_worker_node(cluster, {"worker_node": 1, "awm_runs": 2}, temp_dir)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, worker


@pytest.fixture(scope="package")
def two_node_cluster():
    """ray.cluster_utils.Cluster: both nodes are child processes of this test, stopped by shutdown() (never
    `ray stop`, which would end every Ray on the machine). Its own temp folder, and the address file written
    there, so a plain `ray.init()` elsewhere on this machine does not join this cluster. A node gets 30 s to
    register (Ray's fixed limit), which a machine under heavy load can miss: then the cluster is started again
    (at most three times)."""
    import ray._private.utils as ray_utils

    write_address = ray_utils.write_ray_address
    for attempt in range(3):
        temp_dir = tempfile.mkdtemp(prefix="awm-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
        ray_utils.write_ray_address = lambda address, _temp_dir=None, _dir=temp_dir: write_address(address, _dir)
        dashboard_port = free_port()
        try:
            cluster, worker = _start_cluster(temp_dir, dashboard_port)
            break
        except Exception as exc:  # Ray raises a plain Exception when a node does not register in time
            _kill_processes_under(temp_dir)
            shutil.rmtree(temp_dir, ignore_errors=True)
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
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
        yield {"address": cluster.address, "jobs_address": jobs_address, "cluster": cluster, "worker": worker,
               "temp_dir": temp_dir}
    finally:
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
