"""End to end through the real Dagster webserver and daemon (`dagster dev`) on the instance of several machines:
dagster.cluster.yaml's storage in a real PostgreSQL server of the test's own. One `dagster dev` serves every check
here (starting it and synthesizing the seed batch is most of the time; two of them cost twice that):

- a seed file dropped into the watched folder is picked up by the sensor, its scenario is synthesized by a
  daemon-launched run, the catalog refreshes itself (declarative automation, no catalog job) and the UI's GraphQL
  API shows the scenario partition materialized; a broken seed file beside it is reported, not a crash. One seed
  (the demo's GitHub, its recorded generation keeping only Issue Tracker): the demo's three scenarios cost two more
  whole syntheses here, and the daemon's runs of all three are tested in tests/faults/test_daemon_kill.py;
- meanwhile a backfill of a second seed batch, launched through the UI's GraphQL API, is run by the daemon;
- on the same server, a headless Chromium (Debian's package, driven by Playwright) looks at the UI as a researcher
  would: the asset graph, a scenario's partition page with its checks and previews, and a run launched from the UI;
- a catalog refresh from another process (as `awm catalog --refresh` runs it) lands in the same instance, the UI's
  GraphQL lists every run, they are exactly the rows of PostgreSQL's `runs` table, and no SQLite file appears
  under DAGSTER_HOME.

The daemon on the embedded SQLite storage of dagster.yaml (what `make demo` runs) is driven by
tests/faults/test_daemon_kill.py (sensors, daemon-launched runs, retries) and tests/cluster/test_two_node_runs.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from awm_resources.llm import extract_json
from tests.cluster_pg.postgres import PostgresServer, PostgresUnavailable, start_postgres
from tests.conftest import PROJECT_ROOT, TEST_SENSOR_INTERVAL_S

# In tests/conftest.py's PROCESS_TREES: never beside another daemon or cluster. The waits below allow for a
# 2-core machine loaded 20-fold.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]

SCENARIOS = ["issue_tracker"]
SEED_BATCH = "github"  # one seed of the demo batch, its generation recorded to keep one scenario
CLUSTER_YAML = PROJECT_ROOT / "dagster.cluster.yaml"
CHROMIUM = os.environ.get("AWM_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling Google's hosts, which a closed network refuses.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Screenshots of the browser test: kept as CI artifacts (ignored by git).
ARTIFACTS = Path(os.environ.get("AWM_TEST_ARTIFACTS") or PROJECT_ROOT / "tests" / "artifacts") / "ui"
PAGE_TIMEOUT_MS = 90_000  # 2 shared cores: the UI's first GraphQL answers can take long
LOCATION_WITHIN_S = 600  # the code location loaded in the webserver
SETTLE_WITHIN_S = 1500  # the seed batch synthesized, the catalog refreshed, the backfill done

RUNS = "{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }"
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
CATALOG_MATERIALIZATIONS = ('{ assetOrError(assetKey: {path: ["environment_catalog"]}) { ... on Asset { '
                            'assetMaterializations(limit: 5) { runId } } } }')
REPO = {"repositoryLocationName": "awm", "repositoryName": "__repository__"}
ADD_PARTITION = """mutation($repo: RepositorySelector!, $key: String!) {
  addDynamicPartition(repositorySelector: $repo, partitionsDefName: "seed_batches", partitionKey: $key) {
    __typename ... on Error { message } } }"""
BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on Error { message } } }"""
BACKFILL_STATUS = "query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }"
IN_PROGRESS = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


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


@dataclass
class DevServer:
    port: int
    root: Path  # seeds, other_seeds, recordings, dagster_home, awm_home, dev.log
    env: dict  # the environment of `dagster dev` (and of a command run beside it on the same instance)
    postgres: PostgresServer
    proc: subprocess.Popen
    backfill_id: str = ""
    runs: list = field(default_factory=list)  # every run once the seed batch and the backfill settled
    catalog_runs: list = field(default_factory=list)  # ids of the runs that materialized environment_catalog
    backfill_status: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "dev.log"

    def runs_now(self) -> list[dict]:
        return _graphql(self.port, RUNS)["runsOrError"]["results"]

    def catalog_environments(self) -> int:
        try:
            return len(json.loads((self.root / "awm_home" / "catalog.json").read_text())["environments"])
        except (OSError, ValueError, KeyError):
            return 0

    def settled(self) -> bool:
        """The scenario runs succeeded, the automation's run materialized the catalog with every scenario ready and
        ended (it goes on with the statistics after the catalog), the backfill completed, no run in progress."""
        ended = {r["runId"] for r in self.runs if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")}
        return (sum(r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS" for r in self.runs)
                == len(SCENARIOS) and bool(self.catalog_runs) and self.catalog_runs[0] in ended
                and self.catalog_environments() == len(SCENARIOS)
                and self.backfill_status.startswith("COMPLETED")
                and not [r for r in self.runs if r["status"] in IN_PROGRESS])

    def state(self) -> str:
        return (f"runs {[(r['jobName'], r['status']) for r in self.runs]}, catalog of {self.catalog_environments()}, "
                f"backfill {self.backfill_status or '(none)'}")

    def fail(self, what: str) -> None:
        pytest.fail(f"{what}; {self.state()}; dagster dev log:\n{self.log.read_text(errors='replace')[-6000:]}")

    def stop(self) -> None:
        """SIGINT to `dagster dev` and its children; its graceful stop can take half a minute, nothing is in flight
        by now, so 10 s is enough before SIGKILL."""
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def _wait(server: DevServer, what: str, predicate, timeout_s: float, *, poll_s: float = 2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except OSError:  # the webserver is not answering yet
            pass
        time.sleep(poll_s)
    server.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def postgres():
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:  # a missing server FAILS the test, like bubblewrap's tests
        pytest.fail(str(exc))
    yield server
    server.stop()


def _prepare(root: Path) -> tuple[Path, Path]:
    """The watched seed folder (one seed of the demo batch and a broken file), a second batch outside it (the
    backfill names it: one seed whose one proposal the classifier rejects, recorded for the replay model, so it adds
    no scenario whenever it runs) and the recordings holding their answers (the first batch's: the demo's recorded
    generation and verdicts, cut to Issue Tracker)."""
    seeds, other = root / "seeds", root / "other_seeds"
    seeds.mkdir()
    other.mkdir()
    demo_seeds = (PROJECT_ROOT / "seeds" / "demo.jsonl").read_text().splitlines()
    (seeds / f"{SEED_BATCH}.jsonl").write_text(next(line for line in demo_seeds if '"GitHub"' in line) + "\n")
    (seeds / "broken.jsonl").write_text('{"name": \n')  # must be reported, not crash the sensor
    (other / "second.jsonl").write_text('{"name": "Calculator"}\n')
    replay = root / "recordings"
    shutil.copytree(PROJECT_ROOT / "seeds" / "recordings", replay)
    (replay / f"_batch_{SEED_BATCH}").mkdir()
    for name, key in (("scenarios.1.md", "scenarios"), ("classify.1.md", "verdicts")):
        recorded = extract_json((replay / "_batch_demo" / name).read_text())  # as the pipeline reads the answer
        kept = [item for item in recorded[key] if item["name"] == "Issue Tracker"]
        (replay / f"_batch_{SEED_BATCH}" / name).write_text(json.dumps({key: kept}))
    (replay / "_batch_second").mkdir()
    (replay / "_batch_second" / "scenarios.1.md").write_text(json.dumps({"scenarios": [
        {"name": "Pocket Calculator", "description": "A calculator: type an expression, see its result.",
         "category": "utilities"}]}))
    (replay / "_batch_second" / "classify.1.md").write_text(json.dumps({"verdicts": [
        {"name": "Pocket Calculator", "suitable": False, "reason": "no records a user creates, edits or deletes"}]}))
    return seeds, replay


@pytest.fixture(scope="module")
def dagster_dev(postgres, tmp_path_factory):
    """One `dagster dev` for the module on dagster.cluster.yaml's PostgreSQL storage: the seed batch in the watched
    seed folder, a backfill of the second batch launched through GraphQL as soon as the code location loads, waited
    on until the daemon's sensors have synthesized the batch's scenario and refreshed the catalog and the backfill
    is done."""
    root = tmp_path_factory.mktemp("dagster_dev")
    seeds, replay = _prepare(root)
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
    with open(root / "dev.log", "w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
                                 "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = DevServer(port, root, env, postgres, proc)
    try:
        # The daemon's seed sensor picks up the seed batch as soon as the daemon runs; meanwhile a backfill of the
        # second batch is launched as from the UI, run by the daemon's backfill loop.
        _wait(server, "the code location in the webserver", lambda: [e for e in _graphql(port, LOCATIONS)[
            "workspaceOrError"]["locationEntries"] if e["loadStatus"] == "LOADED"], LOCATION_WITHIN_S)
        added = _graphql(port, ADD_PARTITION, {"repo": REPO, "key": "second"})["addDynamicPartition"]
        assert added["__typename"] == "AddDynamicPartitionSuccess", added
        launched = _graphql(port, BACKFILL, {"params": {
            "selector": {"partitionSetName": "generate_scenarios_partition_set", "repositorySelector": REPO},
            "partitionNames": ["second"],
            "runConfigData": {"ops": {"scenario_generation": {"config": {
                "path": str(root / "other_seeds" / "second.jsonl")}}}},
        }})["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        server.backfill_id = launched["backfillId"]

        def settled() -> bool:
            """One query while runs are in flight (each poll costs the webserver CPU the daemon's runs need on a
            2-core machine); the catalog's and the backfill's state once none is."""
            server.runs = server.runs_now()
            if any(r["status"] in IN_PROGRESS for r in server.runs) or server.catalog_environments() < len(SCENARIOS):
                return False
            mats = _graphql(port, CATALOG_MATERIALIZATIONS)["assetOrError"].get("assetMaterializations") or []
            server.catalog_runs = [m["runId"] for m in mats]
            server.backfill_status = _graphql(port, BACKFILL_STATUS, {"id": server.backfill_id})[
                "partitionBackfillOrError"]["status"]
            return server.settled()

        _wait(server, "the seed batch's synthesis and the second batch's backfill", settled, SETTLE_WITHIN_S,
              poll_s=3)
        yield server
    finally:
        server.stop()


def test_sensor_driven_synthesis_in_dagster_dev(dagster_dev):
    runs = dagster_dev.runs
    assert not [r for r in runs if r["status"] == "FAILURE"], runs
    assert sum(r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS" for r in runs) == len(SCENARIOS), runs
    nodes = _graphql(dagster_dev.port, '{ assetNodes { assetKey { path } partitionKeys } }')["assetNodes"]
    parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
    assert parts["verifiers"] == SCENARIOS
    catalog = json.loads((dagster_dev.root / "awm_home" / "catalog.json").read_text())
    assert [e["name"] for e in catalog["environments"]] == SCENARIOS
    # The catalog was materialized by the declarative automation (no refresh_catalog job ran): the run that
    # wrote it was launched by the catalog_automation sensor, together with the quality summary and statistics.
    assert not [r for r in runs if r["jobName"] == "refresh_catalog"], runs
    by_id = {r["runId"]: r for r in runs}
    auto = by_id[dagster_dev.catalog_runs[0]]
    assert auto["status"] == "SUCCESS", auto
    assert {"key": "dagster/sensor_name", "value": "catalog_automation"} in auto["tags"], auto
    assert "broken.jsonl" in dagster_dev.log.read_text()


def test_backfill_launched_through_graphql_is_run_by_the_daemon(dagster_dev):
    assert dagster_dev.backfill_status == "COMPLETED_SUCCESS", dagster_dev.backfill_status
    tag = {"key": "dagster/backfill", "value": dagster_dev.backfill_id}
    backfilled = [r for r in dagster_dev.runs if tag in r["tags"]]
    assert [(r["jobName"], r["status"]) for r in backfilled] == [("generate_scenarios", "SUCCESS")]
    assert {"key": "dagster/partition", "value": "second"} in backfilled[0]["tags"]
    batch = json.loads((dagster_dev.root / "awm_home" / "batches" / "second.json").read_text())
    assert (batch["counts"]["generated"], batch["counts"]["rejected_by_classifier"]) == (1, 1), batch
    nodes = _graphql(dagster_dev.port, "{ assetNodes { assetKey { path } partitionKeys } }")["assetNodes"]
    parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
    assert parts["scenario_generation"] == [SEED_BATCH, "second"]


# --- the researcher's view, in a real browser ---------------------------------------------------------------

def _require_browser():
    """Chromium from Debian's package and Playwright from the dev extra; missing either FAILS the test."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"Chromium is missing ({CHROMIUM}): the browser test needs Debian's chromium package. "
                    "Install it with `make chromium` (as root: apt-get install -y chromium), "
                    "or point AWM_CHROMIUM at a Chromium binary.")
    try:
        version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"{CHROMIUM} --version failed ({exc}); reinstall Debian's chromium package (`make chromium`)")
    try:
        import playwright.sync_api  # noqa: F401 - only whether it imports
    except ImportError:
        pytest.fail("Playwright for Python is missing: `pip install -e '.[dev]'` (never `playwright install`: "
                    "the test drives Debian's Chromium)")
    return version.strip()


class _Steps:
    """Numbered screenshots, one per step; a failing step leaves the screenshot of that moment
    (NN-name-FAILED.png) and names it in the error."""

    def __init__(self, page, folder: Path):
        self.page, self.folder, self.n = page, folder, 0

    def shot(self, name: str) -> Path:
        path = self.folder / f"{self.n:02d}-{name}.png"
        self.page.screenshot(path=str(path))
        return path

    @contextlib.contextmanager
    def step(self, name: str):
        self.n += 1
        try:
            yield
        except BaseException as exc:
            try:
                path = self.shot(f"{name}-FAILED")
            except Exception as shot_exc:  # noqa: BLE001 - the step's own error matters more
                path = f"(no screenshot: {shot_exc})"
            raise AssertionError(f"UI step {self.n} '{name}' failed at {self.page.url}; screenshot {path}:\n{exc}") \
                from exc
        self.shot(name)


def _visible_text(page, text: str):
    # Dagster's MiddleTruncate renders each name twice (one copy hidden, for measuring): take a visible one.
    return page.get_by_text(text, exact=True).filter(visible=True).first


def _browse(base: str, folder: Path, profile: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with sync_playwright() as pw:
        # A fresh profile (--user-data-dir) per run: nothing from an earlier session, no first-run network calls.
        ctx = pw.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                    args=CHROMIUM_FLAGS, viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            steps = _Steps(page, folder)

            # 1. The synthesis group's asset graph renders with every stage, and the catalog downstream of it.
            with steps.step("asset-graph"):
                page.goto(f"{base}/locations/awm/asset-groups/synthesis")
                for name in ["tasks", "db_schema", "sample_data", "api_spec", "env_code", "verifiers",
                             "environment_catalog"]:
                    expect(_visible_text(page, name)).to_be_visible()

            # 2a. A scenario's partition page: materialized, with its preview (the env code in a code block).
            with steps.step("env_code-issue_tracker-partition"):
                page.goto(f"{base}/assets/env_code?view=partitions&partition=issue_tracker")
                expect(page.get_by_text("Materialized", exact=True).filter(visible=True).first).to_be_visible()
                expect(page.get_by_text("lines_of_code", exact=True)).to_be_visible()
            with steps.step("env_code-issue_tracker-preview"):
                page.locator("tr", has=page.get_by_text("preview", exact=True)).get_by_text("[Show Markdown]").click()
                code = page.get_by_role("dialog").locator("pre code").first
                expect(code).to_contain_text("FastAPI")
                code.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.keyboard.press("Escape")

            # 2b. That partition's results of the (partitioned) asset checks.
            for check, detail in [("env_code_valid", "imports, serves"), ("env_code_quality", "attempt")]:
                with steps.step(f"{check}-issue_tracker"):
                    page.goto(f"{base}/assets/env_code?view=checks&checkDetail={check}")
                    page.locator("button[role=tab]", has_text="Partitions").click()
                    page.locator('div[title="issue_tracker"]').last.click()  # the list's entry, not the filter's tag
                    expect(page.get_by_text("Latest execution", exact=True)).to_be_visible()
                    expect(page.get_by_text("Passed", exact=True)).to_be_visible()
                    expect(page.get_by_text(re.compile(detail)).first).to_be_visible()

            # 3. A run launched from the UI: Materialize on the catalog, follow the toast to the run, see it succeed.
            with steps.step("materialize-environment_catalog"):
                page.goto(f"{base}/assets/environment_catalog")
                page.get_by_role("button", name=re.compile(r"Materialize$")).click()
                expect(page.get_by_text("Launched run")).to_be_visible()
                view = page.get_by_role("link", name="View", exact=True)  # the toast's link to the run
                expect(view).to_have_attribute("href", re.compile(r"^/runs/[0-9a-f-]+$"))
                run_path = view.get_attribute("href")
            with steps.step("run-success"):
                try:
                    view.click(timeout=10_000)
                except Exception:  # noqa: BLE001 - the toast timed out on a slow machine: follow its link instead
                    page.goto(base + run_path)
                page.wait_for_url(re.compile(r"/runs/[0-9a-f-]+$"))
                expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=180_000)
                expect(page.get_by_text("RUN_SUCCESS", exact=True).first).to_be_visible()
        finally:
            ctx.close()


def test_researcher_ui_in_browser(dagster_dev, tmp_path, capsys):
    version = _require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    with capsys.disabled():
        print(f"\n[ui test] {version}; screenshots in {ARTIFACTS}")
    _browse(dagster_dev.url, ARTIFACTS, tmp_path / "chromium-profile")
    runs = _graphql(dagster_dev.port, "{ runsOrError { ... on Runs { results { status } } } }")
    assert not [r for r in runs["runsOrError"]["results"] if r["status"] == "FAILURE"], runs


# --- the instance is PostgreSQL's, and other processes share it ------------------------------------------------

def _postgres_rows(server: DevServer, query: str, *args) -> list[tuple]:
    import psycopg2

    pg = server.postgres
    conn = psycopg2.connect(host="127.0.0.1", port=pg.port, user=pg.user, password=pg.password, dbname=pg.db)
    try:
        with conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall()
    finally:
        conn.close()


def test_refresh_from_another_process_and_every_run_a_postgres_row(dagster_dev):
    """Last in the module: it stops `dagster dev` to look for SQLite files its processes may have left."""
    # A catalog refresh from another process, as `awm catalog --refresh` runs it: the same instance.
    refresh = subprocess.run(
        [sys.executable, "-c", "from awm_assets.inprocess import refresh_catalog; "
         "from awm_assets.instance import get_instance; r = refresh_catalog(get_instance()); "
         "print(r.run_id if r.success else 'FAILED ' + r.run_id)"],
        cwd=PROJECT_ROOT, env=dagster_dev.env, capture_output=True, text=True, timeout=300)
    assert refresh.returncode == 0 and not refresh.stdout.startswith("FAILED"), refresh.stdout + refresh.stderr
    refresh_run = refresh.stdout.strip().splitlines()[-1]

    # The UI's GraphQL reads all of it: the CLI's run, the daemon's runs, every scenario partition; and those runs
    # are exactly PostgreSQL's rows (read until both agree while no run is in progress: an automation run may start
    # between two reads).
    def agree() -> dict | None:
        runs = dagster_dev.runs_now()
        rows = {row[0] for row in _postgres_rows(dagster_dev, "SELECT run_id FROM runs")}
        seen = {r["runId"]: r for r in runs}
        quiet = not [r for r in runs if r["status"] in IN_PROGRESS]
        return seen if quiet and rows == set(seen) and {r["runId"] for r in dagster_dev.runs_now()} == rows else None

    seen = _wait(dagster_dev, "GraphQL's runs and PostgreSQL's runs rows to agree, no run in progress", agree, 300)
    assert seen[refresh_run]["jobName"] == "refresh_catalog" and seen[refresh_run]["status"] == "SUCCESS"
    assert set(seen) >= {r["runId"] for r in dagster_dev.runs}  # the runs of the seed batch and the backfill
    nodes = _graphql(dagster_dev.port, "{ assetNodes { assetKey { path } partitionKeys } }")["assetNodes"]
    parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
    assert parts["verifiers"] == SCENARIOS and parts["scenario_generation"] == sorted([SEED_BATCH, "second"])
    [(backfills,)] = _postgres_rows(dagster_dev, "SELECT count(*) FROM bulk_actions WHERE key = %s",
                                    dagster_dev.backfill_id)
    assert backfills == 1
    [(materializations,)] = _postgres_rows(
        dagster_dev, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")
    assert materializations >= len(SCENARIOS) * 6

    # Nothing fell back to SQLite files under DAGSTER_HOME, once every process of `dagster dev` has ended.
    dagster_dev.stop()
    assert not sorted(str(p) for p in (dagster_dev.root / "dagster_home").rglob("*.db")), "SQLite files under DAGSTER_HOME"
