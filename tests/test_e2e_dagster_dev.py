"""End to end through the real Dagster webserver and daemon: a seed file dropped into the watched folder is
picked up by the sensor, its scenarios are synthesized by daemon-launched runs, the catalog refreshes itself
(declarative automation, no catalog job) and the UI's GraphQL API shows every scenario partition materialized. Then, on the same server, a headless
Chromium (Debian's package, driven by Playwright) looks at the UI as a researcher would: the asset graph, a
scenario's partition page with its checks and previews, and a run launched from the UI."""

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
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, TEST_SENSOR_INTERVAL_S, daemon_dagster_home

pytestmark = pytest.mark.slow

SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
CHROMIUM = os.environ.get("AWM_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling Google's hosts, which a closed network refuses.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Screenshots of the browser test: kept as CI artifacts (ignored by git).
ARTIFACTS = Path(os.environ.get("AWM_TEST_ARTIFACTS") or PROJECT_ROOT / "tests" / "artifacts") / "ui"
PAGE_TIMEOUT_MS = 90_000  # 2 shared cores: the UI's first GraphQL answers can take long


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


CATALOG_MATERIALIZATIONS = ('{ assetOrError(assetKey: {path: ["environment_catalog"]}) { ... on Asset { '
                            'assetMaterializations(limit: 5) { runId } } } }')


@dataclass
class DevServer:
    port: int
    root: Path  # seeds, dagster_home, awm_home, dev.log
    runs: list  # the runs once the demo batch is synthesized and the catalog refreshed (or the wait ran out)
    catalog_runs: list  # ids of the runs that materialized environment_catalog (newest first)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def catalog_environments(self) -> int:
        try:
            return len(json.loads((self.root / "awm_home" / "catalog.json").read_text())["environments"])
        except (OSError, ValueError, KeyError):
            return 0

    @property
    def synthesized(self) -> bool:
        """3 scenario runs succeeded and the automation's run materialized the catalog with all 3 ready and ended
        (it goes on with the statistics after the catalog)."""
        ended = {r["runId"] for r in self.runs if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")}
        return (sum(r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS" for r in self.runs) == 3
                and bool(self.catalog_runs) and self.catalog_runs[0] in ended and self.catalog_environments() == 3)


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """One `dagster dev` for the module: the demo batch dropped into the watched seed folder, waited on until
    the daemon's sensors have synthesized its 3 scenarios and refreshed the catalog."""
    root = tmp_path_factory.mktemp("dagster_dev")
    seeds = root / "seeds"
    seeds.mkdir()
    shutil.copy(PROJECT_ROOT / "seeds" / "demo.jsonl", seeds / "demo.jsonl")
    (seeds / "broken.jsonl").write_text('{"name": \n')  # must be reported, not crash the sensor
    dagster_home = daemon_dagster_home(root / "dagster_home")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AWM_HOME": str(root / "awm_home"),
           "AWM_SEED_DIR": str(seeds), "HF_HUB_OFFLINE": "1", "AWM_SENSOR_INTERVAL_S": TEST_SENSOR_INTERVAL_S}
    port = _free_port()
    log = open(root / "dev.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml",
                             "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        server = DevServer(port, root, [], [])
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            time.sleep(2)
            try:
                data = _graphql(port, "{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }")
                mats = _graphql(port, CATALOG_MATERIALIZATIONS)["assetOrError"].get("assetMaterializations") or []
            except OSError:
                continue
            server.runs = data["runsOrError"]["results"]
            server.catalog_runs = [m["runId"] for m in mats]
            if server.synthesized:
                break
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:  # its graceful stop can take half a minute; nothing is in flight by now, so 10 s is enough
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


def test_sensor_driven_synthesis_in_dagster_dev(dagster_dev):
    runs = dagster_dev.runs
    assert not [r for r in runs if r["status"] == "FAILURE"], runs
    assert sum(r["jobName"] == "synthesize_scenario" and r["status"] == "SUCCESS" for r in runs) == 3, runs
    nodes = _graphql(dagster_dev.port, '{ assetNodes { assetKey { path } partitionKeys } }')["assetNodes"]
    parts = {n["assetKey"]["path"][0]: sorted(n["partitionKeys"]) for n in nodes}
    assert parts["verifiers"] == SCENARIOS
    catalog = json.loads((dagster_dev.root / "awm_home" / "catalog.json").read_text())
    assert len(catalog["environments"]) == 3
    # The catalog was materialized by the declarative automation (no refresh_catalog job ran): the run that
    # wrote it was launched by the catalog_automation sensor, together with the quality summary and statistics.
    assert not [r for r in runs if r["jobName"] == "refresh_catalog"], runs
    by_id = {r["runId"]: r for r in runs}
    auto = by_id[dagster_dev.catalog_runs[0]]
    assert auto["status"] == "SUCCESS", auto
    assert {"key": "dagster/sensor_name", "value": "catalog_automation"} in auto["tags"], auto
    assert "broken.jsonl" in (dagster_dev.root / "dev.log").read_text()


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
    if not dagster_dev.synthesized:
        pytest.fail(f"the demo batch was not synthesized in dagster dev, nothing to look at: {dagster_dev.runs}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    with capsys.disabled():
        print(f"\n[ui test] {version}; screenshots in {ARTIFACTS}")
    _browse(dagster_dev.url, ARTIFACTS, tmp_path / "chromium-profile")
    runs = _graphql(dagster_dev.port, "{ runsOrError { ... on Runs { results { status } } } }")
    assert not [r for r in runs["runsOrError"]["results"] if r["status"] == "FAILURE"], runs
