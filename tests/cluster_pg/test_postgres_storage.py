"""The Dagster instance on PostgreSQL (dagster.cluster.yaml): a real PostgreSQL server of the test's own, `dagster dev`
(webserver + daemon) on it synthesizing the demo batch from the watched seed folder, a backfill of a second seed batch
launched through the UI's GraphQL API and run by the daemon, a catalog refresh from another process (as `awm catalog
--refresh` runs it), and the UI's GraphQL reading every one of those runs, all of them rows in PostgreSQL."""

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
import yaml

from tests.conftest import PROJECT_ROOT, TEST_SENSOR_INTERVAL_S

CLUSTER_YAML = PROJECT_ROOT / "dagster.cluster.yaml"
DEMO_SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                 data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = json.loads(resp.read())
    if body.get("errors"):
        raise AssertionError(f"GraphQL errors: {body['errors']}")
    return body["data"]


RUNS = "{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }"
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
REPO = {"repositoryLocationName": "awm", "repositoryName": "__repository__"}
ADD_PARTITION = """mutation($repo: RepositorySelector!, $key: String!) {
  addDynamicPartition(repositorySelector: $repo, partitionsDefName: "seed_batches", partitionKey: $key) {
    __typename ... on Error { message } } }"""
BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on Error { message } } }"""
BACKFILL_STATUS = "query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }"


def _wait(what: str, predicate, timeout_s: float, log: Path, state=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except OSError:  # the webserver is not answering yet
            pass
        time.sleep(2)
    try:
        seen = state()
    except OSError as exc:
        seen = f"(the webserver did not answer: {exc})"
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; {seen}; dagster dev log:\n"
                         f"{log.read_text(errors='replace')[-6000:]}")


def _catalog_size(awm_home: Path) -> int:
    try:
        return len(json.loads((awm_home / "catalog.json").read_text())["environments"])
    except (OSError, ValueError, KeyError):
        return 0


def _by_job(runs: list[dict], job: str, status: str = "SUCCESS") -> list[dict]:
    return [r for r in runs if r["jobName"] == job and r["status"] == status]


@pytest.fixture(scope="module")
def postgres():
    from tests.cluster_pg.postgres import PostgresUnavailable, start_postgres

    try:
        server = start_postgres()
    except PostgresUnavailable as exc:  # a missing server FAILS the test, like bubblewrap's tests
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.xdist_group("process_trees")  # tests.conftest.PROCESS_TREES: never beside another daemon or cluster
@pytest.mark.timeout(2700)  # the waits below allow for a 2-core machine loaded 20-fold; quiet, it takes ~90 s
def test_demo_batch_backfill_and_refresh_on_postgres(postgres, tmp_path):
    import psycopg2

    root = tmp_path
    seeds, other = root / "seeds", root / "other_seeds"
    seeds.mkdir()
    other.mkdir()
    shutil.copy(PROJECT_ROOT / "seeds" / "demo.jsonl", seeds / "demo.jsonl")
    # The second batch, outside the watched folder (the backfill names it): one seed whose one proposal the
    # classifier rejects, recorded for the replay model, so it adds no scenario whenever it runs.
    (other / "second.jsonl").write_text('{"name": "Calculator"}\n')
    replay = root / "recordings"
    shutil.copytree(PROJECT_ROOT / "seeds" / "recordings", replay)
    (replay / "_batch_second").mkdir()
    (replay / "_batch_second" / "scenarios.1.md").write_text(json.dumps({"scenarios": [
        {"name": "Pocket Calculator", "description": "A calculator: type an expression, see its result.",
         "category": "utilities"}]}))
    (replay / "_batch_second" / "classify.1.md").write_text(json.dumps({"verdicts": [
        {"name": "Pocket Calculator", "suitable": False, "reason": "no records a user creates, edits or deletes"}]}))
    dagster_home = root / "dagster_home"
    dagster_home.mkdir()
    # The cluster config's storage and settings, runs launched on this machine (its Ray run launcher is
    # tests/cluster's), the run queue checked every second (as tests/conftest.py does for dagster.yaml).
    composed = {k: v for k, v in yaml.safe_load(CLUSTER_YAML.read_text()).items() if k != "run_launcher"}
    config = root / "dagster.cluster.test.yaml"
    config.write_text(yaml.safe_dump({**composed, "run_queue": {"dequeue_interval_seconds": 1}}))
    shutil.copy(config, dagster_home / "dagster.yaml")
    env = {**os.environ, **postgres.env, "DAGSTER_HOME": str(dagster_home), "AWM_HOME": str(root / "awm_home"),
           "AWM_DAGSTER_YAML": str(config), "AWM_SEED_DIR": str(seeds), "AWM_REPLAY_DIR": str(replay),
           "HF_HUB_OFFLINE": "1", "AWM_SENSOR_INTERVAL_S": TEST_SENSOR_INTERVAL_S}
    port = _free_port()
    log_path = root / "dev.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
                                 "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            runs = lambda: _graphql(port, RUNS)["runsOrError"]["results"]  # noqa: E731
            # 1. The daemon's seed sensor picks up the demo batch as soon as the daemon runs; meanwhile a backfill
            # of the second batch is launched as from the UI, run by the daemon's backfill loop.
            _wait("the code location in the webserver", lambda: [e for e in _graphql(port, LOCATIONS)[
                "workspaceOrError"]["locationEntries"] if e["loadStatus"] == "LOADED"], 600, log_path)
            added = _graphql(port, ADD_PARTITION, {"repo": REPO, "key": "second"})["addDynamicPartition"]
            assert added["__typename"] == "AddDynamicPartitionSuccess", added
            launched = _graphql(port, BACKFILL, {"params": {
                "selector": {"partitionSetName": "generate_scenarios_partition_set", "repositorySelector": REPO},
                "partitionNames": ["second"],
                "runConfigData": {"ops": {"scenario_generation": {"config": {"path": str(other / "second.jsonl")}}}},
            }})["launchPartitionBackfill"]
            assert launched["__typename"] == "LaunchBackfillSuccess", launched
            backfill_id = launched["backfillId"]

            def settled():
                rs = runs()
                status = _graphql(port, BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
                done = (len(_by_job(rs, "synthesize_scenario")) == 3 and status.startswith("COMPLETED")
                        and _catalog_size(root / "awm_home") == 3
                        and not [r for r in rs if r["status"] in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED")])
                return (rs, status) if done else None

            # 2. The demo's 3 scenarios synthesized by daemon-launched runs, the catalog automation's run settled
            # with all 3 in catalog.json, the backfill done.
            all_runs, status = _wait(
                "the demo batch's synthesis and the second batch's backfill", settled, 1500, log_path,
                lambda: f"runs {[(r['jobName'], r['status']) for r in runs()]}, catalog of "
                        f"{_catalog_size(root / 'awm_home')}, backfill " + str(_graphql(
                            port, BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]))
            assert status == "COMPLETED_SUCCESS", status
            assert not [r for r in all_runs if r["status"] == "FAILURE"], all_runs
            backfilled = [r for r in all_runs if {"key": "dagster/backfill", "value": backfill_id} in r["tags"]]
            assert [(r["jobName"], r["status"]) for r in backfilled] == [("generate_scenarios", "SUCCESS")]
            assert {"key": "dagster/partition", "value": "second"} in backfilled[0]["tags"]
            batch = json.loads((root / "awm_home" / "batches" / "second.json").read_text())
            assert (batch["counts"]["generated"], batch["counts"]["rejected_by_classifier"]) == (1, 1), batch

            # 3. A catalog refresh from another process, as `awm catalog --refresh` runs it: the same instance.
            refresh = subprocess.run(
                [sys.executable, "-c", "from awm_assets.inprocess import refresh_catalog; "
                 "from awm_assets.instance import get_instance; r = refresh_catalog(get_instance()); "
                 "print(r.run_id if r.success else 'FAILED ' + r.run_id)"],
                cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert refresh.returncode == 0 and not refresh.stdout.startswith("FAILED"), refresh.stdout + refresh.stderr
            refresh_run = refresh.stdout.strip().splitlines()[-1]

            # 4. The UI's GraphQL reads all of it: the CLI's run, the daemon's runs, every scenario partition.
            seen = {r["runId"]: r for r in runs()}
            assert seen[refresh_run]["jobName"] == "refresh_catalog" and seen[refresh_run]["status"] == "SUCCESS"
            nodes = _graphql(port, "{ assetNodes { assetKey { path } partitionKeys } }")["assetNodes"]
            parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
            assert parts["verifiers"] == DEMO_SCENARIOS and parts["scenario_generation"] == ["demo", "second"]
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    # 5. Those runs are PostgreSQL's rows, and nothing fell back to SQLite files under DAGSTER_HOME.
    with psycopg2.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password=postgres.password,
                          dbname=postgres.db) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id FROM runs")
        assert {row[0] for row in cur.fetchall()} == set(seen)
        cur.execute("SELECT count(*) FROM bulk_actions WHERE key = %s", (backfill_id,))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")
        assert cur.fetchone()[0] >= 3 * 6
    conn.close()
    assert not sorted(str(p) for p in dagster_home.rglob("*.db")), "SQLite files under DAGSTER_HOME"
