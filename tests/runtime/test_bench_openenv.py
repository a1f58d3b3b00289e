"""`awm bench serve --openenv-url`: an OpenEnv-protocol server as a baseline. `awm serve --openenv` on a copy of the
demo store stands in for a user's server (OpenEnv's own AWM server speaks the same protocol); the bench drives it
with its own WebSocket client beside the pool on the same scenario. No timed assertions: figures present, positive
and consistent with what was asked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.runtime.serving import openenv_server as start_openenv

SCENARIO, TASK = "issue_tracker", 7
SESSIONS, CALLS = 6, 8


def _bench(args: list[str], ray_address: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.serve", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "RAY_ADDRESS": ray_address})


@pytest.fixture(scope="module")
def openenv_server(demo_pristine, tmp_path_factory, ray_address):
    """`awm serve --openenv --port 0` on a copy of the demo store: (its http base, its pid, the store's copy)."""
    store = tmp_path_factory.mktemp("bench_openenv_store")
    shutil.copytree(demo_pristine, store, dirs_exist_ok=True)
    with start_openenv(store, ray_address) as (url, proc, _line):
        yield url, proc.pid, store


def test_bench_openenv_baseline(openenv_server, ray_address):
    url, pid, store = openenv_server
    res = _bench(["--json", "--openenv-only", "--home", str(store), "--hosts", "1", "--openenv-url", url,
                  "--openenv-scenario", SCENARIO, "--openenv-task", str(TASK), "--openenv-pid", str(pid),
                  "--openenv-sessions", str(SESSIONS), "--openenv-calls", str(CALLS)], ray_address, 120)
    assert res.returncode == 0, res.stderr[-3000:]
    o = json.loads(res.stdout)["openenv_baseline"]
    assert "error" not in o, o
    assert o["url"] == url and o["ws_url"] == url.replace("http://", "ws://") + "/ws" and o["pid"] == pid
    assert o["scenario"] == SCENARIO and o["first_observation"]["task_idx"] == TASK
    assert o["resets"] == CALLS + 3 + 1 and o["timed_resets"] == o["timed_calls"] == CALLS  # 3 warm-up rounds, 1 first
    for side in ("pool", "openenv"):
        assert all(o[side][f"{kind}_ms_{q}"] > 0 for kind in ("reset", "call") for q in ("p50", "p99")), side
        assert all(o[side][f"{kind}_ms_p50"] <= o[side][f"{kind}_ms_p99"] for kind in ("reset", "call")), side
    assert all(r > 0 for r in o["ratio_p50_openenv_over_pool"].values())
    assert o["sessions_opened"] == o["pool_instances_opened"] == SESSIONS and "session_errors" not in o
    assert o["open_sessions_wall_s"] > 0 and o["pool_open_instances_wall_s"] > 0
    assert o["server_rss_mb_before"] > 0 and o["server_rss_mb_after"] > 0
    assert isinstance(o["mb_per_extra_session"], float)
    # the server counted the N sessions while they were open, and none is left once the bench closed them
    assert o["server_sessions_while_open"] == o["server_sessions_before"] + SESSIONS
    assert o["server_sessions_after_close"] == o["server_sessions_before"] == 0
    with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
        assert json.loads(resp.read())["sessions"] == 0


def test_bench_openenv_bad_url_is_one_clear_error(tmp_path, ray_address):
    """Nothing listens there: exit 2 at once, naming the address, before any pool is started."""
    import socket

    with socket.socket() as s:  # a port nobody listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        started = time.monotonic()
        res = _bench(["--openenv-only", "--openenv-url", f"http://127.0.0.1:{port}"], ray_address, 60)
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"127.0.0.1:{port}/health" in res.stderr and "no OpenEnv server answers" in res.stderr
    assert time.monotonic() - started < 30
    res = _bench(["--openenv-url", "ftp://example"], ray_address, 60)
    assert res.returncode == 2 and "--openenv-url" in res.stderr
