"""`kill -9` mid-episode: of a host actor (the pool gives the callers Environment Errors, Ray restarts the
actor, `reset` replaces the lost instance, and the actor's sandboxed workers die with it) and of the
raylet (the callers get a clear error, never a hang; the pool says why it cannot recover)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from .conftest import descendants

SLOW_ENV_EXTRA = '''

@app.get("/slow", operation_id="slow_read")
async def slow_read():
    await asyncio.sleep(3)
    return {"slow": True}
'''


def _alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_kill_9_of_a_host_actor_mid_episode(tmp_path):
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.runtime.conftest import BAD_ENV, make_scenario

    make_scenario(tmp_path, "slow_env", BAD_ENV + SLOW_ENV_EXTRA)
    pool = EnvironmentPool(tmp_path, num_hosts=1, prefetch=0, call_timeout_s=5.0)
    try:
        h = pool.acquire("slow_env")
        assert pool.call_tool(h, "add_note", {"text": "before the kill"}).ok
        stats = pool.host_stats()[0]
        actor_pid, worker_pid = stats["pid"], stats["workers"]["slow_env"]
        got = {}

        def in_flight() -> None:
            t = time.monotonic()
            got["result"] = pool.call_tool(h, "slow_read", {})
            got["seconds"] = time.monotonic() - t

        t = threading.Thread(target=in_flight)
        t.start()
        time.sleep(1.0)  # the call is running in the worker
        os.kill(actor_pid, signal.SIGKILL)
        t.join(timeout=60)
        assert not t.is_alive(), "the in-flight call hung after its host actor was killed"
        r = got["result"]
        assert not r.ok and r.error_kind == "environment" and "crashed or restarted" in r.text, r
        deadline = time.monotonic() + 10
        while _alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker_pid), "the sandboxed worker outlived its actor"
        # the pool recovers: reset replaces the lost instance on the restarted actor
        deadline = time.monotonic() + 90
        while True:
            try:
                pool.reset(h)
                if pool.call_tool(h, "list_notes", {}).ok:
                    break
            except Exception:  # noqa: BLE001 - the actor may still be restarting
                pass
            assert time.monotonic() < deadline, "the pool did not recover from the killed host actor"
            time.sleep(0.5)
        texts = [n["text"] for n in json.loads(pool.call_tool(h, "list_notes", {}).text)["notes"]]
        assert texts == ["first", "second"]  # a fresh instance: the lost one's state is gone, as reported
        assert pool.host_stats()[0]["pid"] != actor_pid
        pool.release(h)
    finally:
        pool.close()


RAYLET_SCRIPT = r'''
import json, os, sys, time
import awm_rl.runtime.pool
from awm_rl.runtime.pool import EnvironmentPool

# With the raylet gone no host can come back: reset's retries answer the same after 5 s as after the default 20.
awm_rl.runtime.pool.HOST_RESTART_WAIT_S = 5.0

# The records go to their own file: Ray's own report of the raylet's death lands on the driver's stdout, even
# in the middle of a line the driver is writing.
records = open(sys.argv[2], "a", buffering=1)  # line-buffered: each record is on disk once written


def record(line):
    records.write(line + "\n")


pool = EnvironmentPool(sys.argv[1], num_hosts=1, prefetch=0, call_timeout_s=2.0, batch_slack_s=5.0)
h = pool.acquire("slow_env")
assert pool.call_tool(h, "add_note", {"text": "before"}).ok
import ray._private.worker as ray_worker
raylet = [p.pid for role, p in ray_worker._global_node.live_processes() if role == "raylet"][0]
record(f"RAYLET {raylet}")
os.kill(raylet, 9)
# The episode goes on: direct actor calls may outlive the raylet for a while; once three calls in a row came
# back as errors, the next ones would only say the same.
until, failed = time.monotonic() + 20, 0
while time.monotonic() < until and failed < 3:
    t = time.monotonic()
    r = pool.call_tool(h, "list_notes", {})
    record("CALL " + json.dumps({"ok": r.ok, "kind": r.error_kind, "text": r.text[:300], "s": time.monotonic() - t}))
    failed = 0 if r.ok else failed + 1
    time.sleep(0.5)
try:
    pool.reset(h)
    record("RESET ok")
except Exception as exc:
    record(f"RESET {type(exc).__name__}: {exc}".replace("\n", " "))
'''


@pytest.mark.slow
def test_kill_9_of_the_raylet_mid_episode(tmp_path):
    from tests.runtime.conftest import BAD_ENV, make_scenario

    make_scenario(tmp_path, "slow_env", BAD_ENV + SLOW_ENV_EXTRA)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    # The GCS checks its nodes every second (every 3 s by default): the dead raylet is noticed in about 5 s, not 15.
    env.update(PYTHONUNBUFFERED="1", RAY_health_check_period_ms="1000")
    records, stderr = tmp_path / "records.txt", tmp_path / "driver.stderr"
    # files, not pipes: nothing to drain, and a full pipe never blocks the driver
    with open(tmp_path / "driver.stdout", "w") as out, open(stderr, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-c", RAYLET_SCRIPT, str(tmp_path), str(records)], stdout=out,
                                stderr=err_file, env=env, start_new_session=True)
    family: set[int] = set()

    def recorded() -> list[str]:
        return records.read_text().splitlines() if records.exists() else []

    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            family.update(descendants(proc.pid))  # Ray's processes, known before the raylet's death orphans them
            time.sleep(0.2)
        if proc.poll() is None:
            raise AssertionError(f"the driver hung after the raylet was killed: {recorded()}")
        err = stderr.read_text()
        lines = recorded()
        assert any(x.startswith("RAYLET") for x in lines), (lines, err[-2000:])
        calls = [json.loads(x[5:]) for x in lines if x.startswith("CALL ")]
        for call in calls:  # every call came back (no hang): answered, or a clear Environment Error
            assert call["s"] < 60, call
            assert call["ok"] or (call["kind"] == "environment" and (
                "crashed or restarted" in call["text"] or "did not answer" in call["text"])), call
        if proc.returncode == 0:  # the driver survived the episode: reset answered or said why not
            assert any(x.startswith("RESET") for x in lines), lines
        else:  # Ray ended the driver: it must say why
            assert "raylet" in err.lower() or "node" in err.lower(), err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in family | set(descendants(proc.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
