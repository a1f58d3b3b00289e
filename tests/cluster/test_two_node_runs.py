"""Whole runs on Ray, and a node lost mid-run, on the cluster of tests/cluster/conftest.py plus a second worker
node: `awm synth --cluster` (chosen by itself: RAY_ADDRESS is set and the instance's run launcher is dagster.cluster.yaml's
AwmRayRunLauncher) launches the demo batch's runs, each run one Ray job on a node with `awm_runs` (never the
head), while a real `dagster-daemon` monitors them. As soon as one scenario's run has stored a stage and is
executing the next, its node is killed (every process of it: raylet, workers, the run's process), while a
rollout batch is in flight on an environment host on each worker node. The run is marked failed with Ray's
reason, `run_retries` re-executes it from the stage it was in on the remaining node, and `awm synth --cluster`
follows it to the end: every scenario whole, nothing stored before the kill rewritten. The episode on the lost
host comes back as an environment error (no hang), the other answers, and reset recreates the lost instance on
the host that Ray restarted on a remaining node.

Storage: the SQLite storage of dagster.yaml in a folder both nodes see (one machine stands in for the shared
filesystem; the PostgreSQL storage of dagster.cluster.yaml is tested in tests/cluster_pg), with the run_launcher
section exactly as dagster.cluster.yaml ships it. Runs here are the last tests of tests/cluster/: the kill takes
a node of the shared cluster away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.cluster.conftest import add_worker_node
from tests.conftest import PROJECT_ROOT, kill_process_groups
from tests.faults.test_daemon_kill import _check_whole, _failure_message, _snapshot, _steps

pytestmark = pytest.mark.slow

SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
KILL_WITHIN_S = 300  # until a scenario run on a worker node has stored a stage and executes the next
SYNTH_WITHIN_S = 900  # after the kill: the lost runs' retries wait for a free `awm_runs` slot on the other node


def instance_yaml(dagster_home: Path) -> Path:
    """dagster.yaml (SQLite storage, run retries and monitoring as shipped) plus dagster.cluster.yaml's
    run_launcher; run monitoring and the run queue look every few seconds (120 s and 5 s by default)."""
    config = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    cluster = yaml.safe_load((PROJECT_ROOT / "dagster.cluster.yaml").read_text(encoding="utf-8"))
    assert cluster.get("run_launcher", {}).get("class") == "AwmRayRunLauncher", "dagster.cluster.yaml: no Ray launcher"
    config["run_launcher"] = cluster["run_launcher"]
    config["run_monitoring"]["poll_interval_seconds"] = 3
    config["run_queue"] = {"dequeue_interval_seconds": 1}
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home.parent / "dagster.test-cluster.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _node_ids(cluster_info) -> dict[str, str]:
    import ray

    ray.init(address=cluster_info["address"], logging_level="WARNING")
    try:
        return {n["NodeID"]: ("head" if n["Resources"].get("head_node") else
                              "worker" if n["Resources"].get("worker_node") else "spare")
                for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()


def kill_node(cluster, node) -> None:
    """A node lost as a machine is: SIGKILL at once to each of its processes and everything they started (Ray's
    workers, the job supervisor and the run's own process below it, which runs in a session of its own and
    would otherwise go on), then the cluster's bookkeeping of the node."""
    doomed = []
    for _, popen in node.live_processes():
        try:
            proc = psutil.Process(popen.pid)
            doomed += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in doomed:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    # Cluster.remove_node's bookkeeping, without its refusal: on one machine it takes any node for the one a
    # driver of this process is attached to (the pool's driver is on the head: asserted by the test).
    node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
    cluster.worker_nodes.remove(node)


def _host_nodes(pool, address: str) -> list[str]:
    """The node of each host actor of the pool, by host index."""
    from ray.util.state import list_actors

    alive = list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=1000)
    node_of = {a.actor_id: a.node_id for a in alive}
    return [node_of.get(actor._actor_id.hex(), "") for actor in pool._actors]


def _episodes(handles) -> dict:
    """One slow tool call (3 s in the environment) per (pool, instance), all at once, in threads: the rollout
    batch."""
    import threading

    got: dict = {}

    def episode(i: int, pool, h) -> None:
        t = time.monotonic()
        r = pool.call_tool(h, "slow_read", {})
        got[i] = {"ok": r.ok, "kind": r.error_kind, "text": r.text[:300], "s": round(time.monotonic() - t, 1)}

    threads = [threading.Thread(target=episode, args=(i, pool, h), daemon=True) for i, (pool, h) in enumerate(handles)]
    for t in threads:
        t.start()
    return {"threads": threads, "results": got}


@pytest.mark.timeout(KILL_WITHIN_S + SYNTH_WITHIN_S + 300)
def test_synth_cluster_runs_on_worker_nodes_and_survives_a_lost_node(two_node_cluster, tmp_path, monkeypatch):
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG

    from awm_assets.defs.shared.run_launcher import RAY_NODE_TAG
    from awm_resources.store import ArtifactStore

    cluster = two_node_cluster["cluster"]
    spare = add_worker_node(cluster, {"awm_runs": 2}, two_node_cluster["temp_dir"])
    nodes = _node_ids(two_node_cluster)
    by_id = {cluster.head_node.node_id: cluster.head_node, spare.node_id: spare,
             two_node_cluster["worker"].node_id: two_node_cluster["worker"]}
    assert sorted(nodes.values()) == ["head", "spare", "worker"], nodes

    dagster_home, awm_home, seeds = tmp_path / "dagster_home", tmp_path / "awm_home", tmp_path / "seeds"
    seeds.mkdir()
    yaml_path = instance_yaml(dagster_home)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AWM_DAGSTER_YAML": str(yaml_path),
           "AWM_HOME": str(awm_home), "AWM_SEED_DIR": str(seeds), "AWM_LLM_MODEL": "replay", "HF_HUB_OFFLINE": "1",
           "RAY_ADDRESS": two_node_cluster["address"], "AWM_RAY_JOBS_ADDRESS": two_node_cluster["jobs_address"],
           "RAY_AUTH_MODE": "disabled",
           # The daemon's sensors look once at start (nothing to do then) and not again: the runs here are
           # awm synth's and the retries run_retries makes.
           "AWM_SENSOR_INTERVAL_S": "3600"}
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))  # the SQLite storage's folder (`env: DAGSTER_HOME`)
    instance = DagsterInstance.from_config(str(dagster_home))
    # The SQLite storages created here first (a daemon and awm creating them at once can both stamp the schema).
    instance.get_runs(limit=1)
    instance.all_instigator_state()
    instance.get_asset_keys()
    store = ArtifactStore(awm_home)

    timeline: list[str] = []
    t0 = time.monotonic()

    def note(text: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f}s {text}")

    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> subprocess.Popen:
        log, out = open(tmp_path / f"{name}.log", "w"), open(tmp_path / f"{name}.out", "w")
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=log, start_new_session=True)
        log.close()
        out.close()
        procs.append(proc)
        note(f"{name} started (pid {proc.pid})")
        return proc

    def logs() -> str:
        return "\n".join(f"--- {p.name}:\n" + p.read_text(errors="replace")[-4000:] for p in sorted(tmp_path.glob("*.log")))

    # Environment hosts, each serving its own scenario.
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.faults.test_kill_ray import SLOW_ENV_EXTRA
    from tests.runtime.conftest import BAD_ENV, make_scenario

    env_store = tmp_path / "env_store"
    envs = [f"slow_env_{i}" for i in range(2)]
    for name in envs:
        make_scenario(env_store, name, BAD_ENV + SLOW_ENV_EXTRA)
    awm_home.mkdir()
    monkeypatch.setenv("AWM_HOME", str(awm_home))
    import ray

    bin_dir = Path(sys.executable).parent
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pools: list = []
    try:
        # A host on each worker node, by soft affinity: there first, anywhere else Ray can once that node is gone.
        for worker_node in (two_node_cluster["worker"], spare):
            pools.append(EnvironmentPool(env_store, num_hosts=1, prefetch=0, call_timeout_s=5.0,
                                         ray_address=two_node_cluster["address"], actor_options={
                                             "scheduling_strategy": NodeAffinitySchedulingStrategy(worker_node.node_id,
                                                                                                   soft=True)}))
        assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id, "the pool's driver is not on the head"
        handles = [(pool, pool.acquire(name)) for pool, name in zip(pools, envs, strict=True)]
        assert all(pool.call_tool(h, "add_note", {"text": "before"}).ok for pool, h in handles)
        hosts_before = [_host_nodes(pool, two_node_cluster["jobs_address"])[0] for pool in pools]
        assert all(nodes.get(n) for n in hosts_before), (hosts_before, nodes)

        start("daemon", [str(bin_dir / "dagster-daemon"), "run", "-w", "workspace.yaml"])
        synth = start("synth", [str(bin_dir / "awm"), "synth", "--seed-batch", str(PROJECT_ROOT / "seeds" / "demo.jsonl"),
                                "--json"])
        deadline = time.monotonic() + KILL_WITHIN_S
        victim = None
        while victim is None:
            if time.monotonic() > deadline or synth.poll() is not None:
                pytest.fail(f"no scenario run executed a stage on a worker node within {KILL_WITHIN_S} s: "
                            f"{[(r.job_name, r.status.value, r.tags.get(RAY_NODE_TAG)) for r in instance.get_runs()]}"
                            f"\n{logs()}")
            time.sleep(0.5)
            for run in instance.get_runs():
                if run.job_name != "synthesize_scenario" or run.status != DagsterRunStatus.STARTED:
                    continue
                node = run.tags.get(RAY_NODE_TAG)
                done, running = _steps(instance, run.run_id)
                if node and done and running:
                    key = run.tags["dagster/partition"]
                    victim = (run, node, running[0], done, _snapshot(store, key, done))
        run, node, step, done, before = victim
        assert nodes.get(node) in ("worker", "spare"), (node, nodes)
        # --- the node goes: SIGKILL to every process of it (raylet, its workers, the run's process) -------------
        batch = _episodes(handles)
        time.sleep(1.0)  # the calls are running in the environments
        kill_node(cluster, by_id[node])
        note(f"killed the {nodes[node]} node {node[:8]} while {run.tags['dagster/partition']} ran {step} after {done}")
        for t in batch["threads"]:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in batch["threads"]), "an episode hung after its node was lost"
        note(f"episodes: {batch['results']}")
        # The pool recovers: an instance that answers is left alone; a lost one is replaced by reset, on a host
        # Ray restarted on a remaining node.
        deadline = time.monotonic() + 120
        for pool, h in handles:
            while not pool.call_tool(h, "list_notes", {}).ok:
                try:
                    pool.reset(h)
                except Exception:  # noqa: BLE001 - the host may still be restarting
                    pass
                assert time.monotonic() < deadline, f"instance {h.instance_id} was not recreated after the node loss"
                time.sleep(0.5)
        hosts_after = [_host_nodes(pool, two_node_cluster["jobs_address"])[0] for pool in pools]
        notes_after = [[n["text"] for n in json.loads(pool.call_tool(h, "list_notes", {}).text)["notes"]]
                       for pool, h in handles]
        note(f"hosts before {[n[:8] for n in hosts_before]}, after {[n[:8] for n in hosts_after]}")
        try:
            synth.wait(timeout=SYNTH_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"awm synth --cluster did not end within {SYNTH_WITHIN_S} s after the kill:\n"
                        + "\n".join(timeline) + "\n" + logs())
        note(f"awm synth exited {synth.returncode}")
    finally:
        for pool in pools:
            pool.close()
        ray.shutdown()  # before the cluster's shutdown, which refuses to stop the node a driver is attached to
        kill_process_groups(procs)
    output = (tmp_path / "synth.out").read_text()
    story = "\n".join(timeline)
    print("\n" + story)
    assert synth.returncode == 0, f"awm synth --cluster failed:\n{story}\n{logs()}"
    out = json.loads(output)

    # Every run was a Ray job on a worker node (never the head), recorded on the run.
    runs = {r.run_id: r for r in instance.get_runs()}
    assert nodes.get(out["generation_node"]) in ("worker", "spare"), out
    assert [s["scenario"] for s in out["scenarios"]] == SCENARIOS and all(s["ready"] for s in out["scenarios"]), out
    for s in out["scenarios"]:
        assert nodes.get(s["ray_node"]) in ("worker", "spare"), s
    # The killed run: failed with Ray's reason, retried by run_retries (the daemon) on the remaining node.
    killed = runs[run.run_id]
    message = _failure_message(instance, run.run_id)
    assert killed.status == DagsterRunStatus.FAILURE and "Ray job" in message, (killed.status, message)
    retry = runs[killed.tags[AUTO_RETRY_RUN_ID_TAG]]
    assert retry.status == DagsterRunStatus.SUCCESS and retry.tags[RAY_NODE_TAG] != node, (retry.tags, nodes)
    report = next(s for s in out["scenarios"] if s["scenario"] == run.tags["dagster/partition"])
    assert report["retried_from"] == run.run_id and runs[report["run_id"]].root_run_id == run.run_id, report
    # Re-executed from where the killed run stopped: the stage it was in, unless that stage's success was recorded
    # between the observation and the kill landing; nothing the killed run completed runs again, and what it had
    # stored before the kill was kept as is.
    killed_done, retried = _steps(instance, run.run_id)[0], _steps(instance, retry.run_id)[0]
    assert set(done) <= set(killed_done) and not set(killed_done) & set(retried), (done, killed_done, retried)
    assert step in killed_done + retried, (step, killed_done, retried)
    assert _snapshot(store, run.tags["dagster/partition"], done) == before, f"{done} changed after the kill"
    problems = {key: _check_whole(store, key) for key in SCENARIOS}
    assert not any(problems.values()), (problems, story)
    assert out["catalog_run"]["success"], out

    # The rollout batch: the episodes on the lost node's host came back as environment errors, the others
    # answered; every host now lives on a remaining node, the lost instances fresh ones.
    # Soft affinity places a host on each worker node unless Ray finds that node unavailable at the time (seen
    # once, after the other tests of the folder): then both may share a node and the kill may take none of them.
    lost = {i for i, n in enumerate(hosts_before) if n == node}
    print(f"[node loss] hosts before {hosts_before}, lost {sorted(lost)}")
    for i, result in batch["results"].items():
        if i in lost:
            assert not result["ok"] and result["kind"] == "environment", result
        else:
            assert result["ok"], result
    assert len(batch["results"]) == len(handles)
    assert node not in hosts_after and all(nodes.get(n) for n in hosts_after), (hosts_after, nodes)
    for i in range(len(handles)):  # a lost instance is a fresh one (its note gone, as reported); the other kept its
        assert ("before" in notes_after[i]) == (i not in lost), (i, notes_after)
