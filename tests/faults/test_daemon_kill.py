"""The Dagster daemon killed with SIGKILL mid-backfill, then restarted: no artifact lost or half-written, every
failure a clear error.

A real `dagster-daemon run` over the offline demo batch: its sensors launch scenario generation, then one
`synthesize_scenario` run per new scenario. As soon as one of those runs is executing a stage, the daemon's
whole process group gets SIGKILL: the daemon, the code server it started and the run workers that code server
spawned (DefaultRunLauncher runs each run in a child process of the code server, in the daemon's group), as when
a container, a systemd unit or a terminal session is killed. Nothing is left to report those runs' outcomes and
Dagster's run monitoring cannot check workers of the default run launcher, so without `run_worker_watchdog`
(awm_assets/defs/runs/watchdog.py) they would stay STARTED/STARTING forever. After the restart the watchdog marks them
failed with the reason, `run_retries` (dagster.yaml) re-executes them from their failed steps, and every scenario
ends synthesized with every artifact whole.

(SIGKILL to the daemon's pid alone is milder: the code server outlives it until its runs finish, so runs in
flight end SUCCESS and the restarted daemon launches the queued ones.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import PROJECT_ROOT, TEST_SENSOR_INTERVAL_S, daemon_dagster_home, kill_process_groups

pytestmark = pytest.mark.slow

SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
IN_PROGRESS = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
WATCHED_JOBS = ("generate_scenarios", "synthesize_scenario")
KILL_WITHIN_S = 150  # until a synthesis run is executing a stage (about 40 s here)
# After the restart: the watchdog's next tick (2 s here: AWM_SENSOR_INTERVAL_S=4), the retry, one scenario's six
# stages (about 10 s). A run killed between being marked STARTING and reaching its code server is left to run
# monitoring's start timeout (180 s, dagster.yaml); this deadline leaves room for that rare case.
SETTLE_WITHIN_S = 300


def _group_alive(pgid: int) -> list[str]:
    """Processes of a process group that still run (zombies excluded: PID 1 of a container may never reap them)."""
    out = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.info['pid']}: {' '.join(proc.info['cmdline'] or [])[:120]}")
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _failure_message(instance, run_id: str) -> str:
    from dagster import DagsterEventType

    events = instance.all_logs(run_id, of_type=DagsterEventType.PIPELINE_FAILURE)
    return (events[-1].dagster_event.message or events[-1].user_message) if events else ""


def _steps(instance, run_id: str) -> tuple[list[str], list[str]]:
    """The steps of a run that succeeded, and those started that have not ended."""
    from dagster import DagsterEventType

    started, succeeded, ended = [], [], set()
    for ev in instance.all_logs(run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
                                                 DagsterEventType.STEP_FAILURE}):
        if ev.dagster_event.event_type == DagsterEventType.STEP_START:
            started.append(ev.step_key)
        else:
            ended.add(ev.step_key)
            if ev.dagster_event.event_type == DagsterEventType.STEP_SUCCESS:
                succeeded.append(ev.step_key)
    return succeeded, [s for s in started if s not in ended]


def _snapshot(store, key: str, stages) -> dict[str, tuple[float, bytes]]:
    from awm_resources.store import STAGE_FILES

    files = [f for stage in stages for f in (*STAGE_FILES[stage], f"status/{stage}.json")]
    return {f: (store.path(key, f).stat().st_mtime, store.path(key, f).read_bytes()) for f in files}


def _check_whole(store, key: str) -> list[str]:
    """What is wrong with a synthesized scenario's files: missing stages, unreadable or empty artifacts, status
    documents that do not match the artifacts and attempts, temp files a killed writer left behind."""
    from awm_assets.inprocess import scenario_report
    from awm_resources.store import PIPELINE_STAGES, STAGE_FILES, STAGES

    problems = []
    folder = store.scenario_dir(key)
    missing = set(STAGES) - set(store.present_stages(key))
    if missing:
        problems.append(f"stages missing: {sorted(missing)}")
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.name.startswith(".") or ".tmp" in path.name:
            problems.append(f"temp file left behind: {rel}")
        elif path.is_file() and path.stat().st_size == 0:
            problems.append(f"empty file: {rel}")
        elif path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                problems.append(f"{rel} is not whole JSON: {exc}")
    if (folder / "server.py").is_file():
        try:
            compile((folder / "server.py").read_text(encoding="utf-8"), str(folder / "server.py"), "exec")
        except SyntaxError as exc:
            problems.append(f"server.py does not compile: {exc}")
    if (folder / "initial.db").is_file():
        con = sqlite3.connect(f"file:{folder / 'initial.db'}?mode=ro", uri=True)
        try:
            check = con.execute("PRAGMA integrity_check").fetchone()[0]
            tables = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        finally:
            con.close()
        if check != "ok" or not tables:
            problems.append(f"initial.db: integrity {check!r}, {tables} tables")
    for stage in PIPELINE_STAGES:
        status = store.stage_status(key, stage)
        if status is None:
            problems.append(f"{stage}: no status document")
            continue
        attempts = store.list_attempts(key, stage)
        if status.get("stage") != stage or not status.get("valid"):
            problems.append(f"{stage}: status document says {status}")
        if status.get("attempts") != len(attempts) or not attempts or not attempts[-1].get("passed"):
            problems.append(f"{stage}: status counts {status.get('attempts')} attempts, the store holds "
                            f"{[(a.get('attempt'), a.get('passed')) for a in attempts]}")
        newest = max(store.path(key, f).stat().st_mtime for f in STAGE_FILES[stage] if store.has(key, f)) \
            if any(store.has(key, f) for f in STAGE_FILES[stage]) else 0
        if newest > status.get("written_at", 0) + 1:
            problems.append(f"{stage}: artifacts rewritten after the status document (a stale status)")
    report = scenario_report(store, key)
    if not report["ready"]:
        problems.append(f"not ready: {report['stages']}")
    return problems


def test_daemon_killed_mid_backfill_and_restarted(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from awm_resources.store import ArtifactStore

    seeds, dagster_home, awm_home = tmp_path / "seeds", tmp_path / "dagster_home", tmp_path / "awm_home"
    seeds.mkdir()
    daemon_dagster_home(dagster_home)
    shutil.copy(PROJECT_ROOT / "seeds" / "demo.jsonl", seeds / "demo.jsonl")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AWM_HOME": str(awm_home), "AWM_SEED_DIR": str(seeds),
           "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled", "AWM_SENSOR_INTERVAL_S": TEST_SENSOR_INTERVAL_S}
    instance = DagsterInstance.get()
    # Create the SQLite storages here first: a daemon and this process creating them at once can both stamp
    # the schema version ("alembic_version has more than one head"), and the code server then fails to load.
    instance.get_runs(limit=1)
    instance.all_instigator_state()
    instance.get_asset_keys()
    store = ArtifactStore(awm_home)

    daemons: list[subprocess.Popen] = []
    timeline: list[str] = []
    t0 = time.monotonic()

    def note(text: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f}s {text}")

    def start_daemon() -> subprocess.Popen:
        log = open(tmp_path / f"daemon{len(daemons) + 1}.log", "w")
        proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        daemons.append(proc)
        note(f"daemon {len(daemons)} started (pid {proc.pid})")
        return proc

    def runs(jobs=WATCHED_JOBS):
        return [r for r in instance.get_runs() if r.job_name in jobs]

    def logs() -> str:
        return "\n".join(f"--- {p.name}:\n" + p.read_text(errors="replace")[-3000:]
                         for p in sorted(tmp_path.glob("daemon*.log")))

    try:
        first = start_daemon()
        deadline = time.monotonic() + KILL_WITHIN_S
        victim = None
        while victim is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no synthesis run executed a stage within {KILL_WITHIN_S} s: "
                            f"{[(r.job_name, r.status.value) for r in runs()]}\n{logs()}")
            time.sleep(0.25)
            for run in runs(("synthesize_scenario",)):
                # Mid-scenario: at least one stage stored by this run, the next one executing.
                done, running = _steps(instance, run.run_id) if run.status.value == "STARTED" else ([], [])
                if done and running:
                    key = run.tags["dagster/partition"]
                    victim = (run, running[0], done, _snapshot(store, key, done))

        # --- SIGKILL: the daemon with its code server and run workers ----------------------------------------
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        at_kill = {r.run_id: r for r in runs()}
        note(f"SIGKILL to the daemon's process group while {victim[0].tags['dagster/partition']} ran step "
             f"{victim[1]} after {victim[2]}; runs: "
             f"{sorted((r.tags.get('dagster/partition'), r.status.value) for r in at_kill.values())}")
        until = time.monotonic() + 10
        while _group_alive(first.pid) and time.monotonic() < until:
            time.sleep(0.2)
        assert not _group_alive(first.pid), f"processes of the killed daemon survive: {_group_alive(first.pid)}"
        lost = {rid for rid, r in at_kill.items() if r.status.value in ("STARTING", "STARTED")}
        assert victim[0].run_id in lost

        # --- restart, then wait until every run settles and every scenario has a successful run --------------
        start_daemon()
        deadline = time.monotonic() + SETTLE_WITHIN_S
        seen: dict[str, str] = {}
        while True:
            current = runs()
            for r in current:
                if seen.get(r.run_id) != r.status.value:
                    seen[r.run_id] = r.status.value
                    note(f"{r.job_name} {r.tags.get('dagster/partition')} {r.run_id[:8]} "
                         f"{'(retry of ' + r.parent_run_id[:8] + ') ' if r.parent_run_id else ''}{r.status.value}")
            done = {r.tags.get("dagster/partition") for r in current
                    if r.job_name == "synthesize_scenario" and r.status.value == "SUCCESS"}
            busy = [r for r in current if r.status.value in IN_PROGRESS]
            if not busy and set(SCENARIOS) <= done:
                break
            if time.monotonic() > deadline:
                states = [(r.job_name, r.tags.get("dagster/partition"), r.status.value) for r in current]
                pytest.fail(f"not settled {SETTLE_WITHIN_S} s after the restart (runs still in progress are "
                            f"left hanging): {states}\n" + "\n".join(timeline) + "\n" + logs())
            time.sleep(1)
        note("settled")
    finally:
        kill_process_groups(daemons)
    final = {r.run_id: r for r in runs()}
    for rid in sorted(lost):
        note(f"{rid[:8]} failure: {_failure_message(instance, rid)}")
    story = "\n".join(timeline)
    print("\n" + story)

    # Every run the kill left in progress ended FAILURE, saying what happened (never hanging, never silent).
    for rid in lost:
        run = final[rid]
        message = _failure_message(instance, rid)
        assert run.status.value == "FAILURE", (rid, run.status, story)
        assert ("Run worker lost" in message and "code server that launched it" in message) \
            or "seconds to start" in message, (rid, message)
    # No other run failed: every failure is one the kill caused, and each was retried to success.
    assert {rid for rid, r in final.items() if r.status.value == "FAILURE"} == lost, story
    for rid in lost:
        retries = [r for r in final.values() if r.root_run_id == rid or r.parent_run_id == rid]
        assert any(r.status.value == "SUCCESS" for r in retries), (rid, story)
    # The killed scenario resumed from the stage it was in: what it had stored before the kill was kept as is.
    run, step, done, before = victim
    retried = [r for r in final.values() if r.parent_run_id == run.run_id]
    assert retried and step in _steps(instance, retried[0].run_id)[0], (step, story)
    assert not set(done) & set(_steps(instance, retried[0].run_id)[0]), (done, story)
    assert _snapshot(store, run.tags["dagster/partition"], done) == before, f"{done} changed after the kill"
    # The kill lost nothing and left nothing half-written: every scenario is whole, with all its stages.
    assert sorted(instance.get_dynamic_partitions("scenarios")) == SCENARIOS
    demo = [k for k in store.list_scenarios() if store.read_json(k, "scenario.json").get("seed_batch") == "demo"]
    assert demo == SCENARIOS, demo
    problems = {key: _check_whole(store, key) for key in SCENARIOS}
    assert not any(problems.values()), (problems, story)


def test_temp_file_of_a_killed_writer_is_swept_by_the_next_write(tmp_path):
    """The store's half of the guarantee, deterministically: a writer SIGKILLed mid-write (here building a
    SQLite database in place of initial.db, the longest write) leaves its temp files; the next write of that file
    removes them while a live writer's temp file is kept."""
    from awm_resources.store import atomic_write_text

    target = tmp_path / "scenario" / "initial.db"
    target.parent.mkdir()
    writer = ("import sqlite3, sys, time\nfrom pathlib import Path\nfrom awm_resources.store import atomic_path\n"
              "with atomic_path(Path(sys.argv[1])) as tmp:\n"
              "    con = sqlite3.connect(tmp); con.execute('BEGIN'); con.execute('CREATE TABLE t (x)')\n"
              "    con.execute('INSERT INTO t VALUES (1)'); print('writing', flush=True); time.sleep(60)\n")
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(target)], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "writing"
        killed, live = procs

        def temp_of(proc):
            return sorted(p.name for p in target.parent.iterdir() if f"-{proc.pid}." in p.name)

        assert temp_of(killed) and temp_of(live)  # the database and its journal, per writer
        killed.kill()  # SIGKILL, not reaped yet: a zombie, as the run workers of a killed daemon stay under PID 1
        time.sleep(0.2)
        atomic_write_text(target, "next")
        assert temp_of(killed) == [], sorted(p.name for p in target.parent.iterdir())
        assert temp_of(live), "a live writer's temp file was removed"
        assert target.read_text() == "next"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
