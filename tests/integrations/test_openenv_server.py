"""`awm serve --openenv` driven by the `openenv` package's own clients (MCPToolClient, GenericEnvClient), many
sessions at once: each a pool instance, isolated from the others, restored by reset, judged only at its end."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.runtime.serving import openenv_server

OPENENV_PYTHON = PROJECT_ROOT / ".venv" / "openenv" / "bin" / "python"
CLIENT = Path(__file__).with_name("openenv_client.py")
SESSIONS = 16
IDLE_S = 8  # the server closes a session nobody holds or used for this long
SCENARIO, TASK = "issue_tracker", 7  # task 7 creates a milestone and moves issues into it (writes it verifies)


@pytest.fixture(scope="module")
def store(demo_pristine, tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("openenv_store")
    shutil.copytree(demo_pristine, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def server(store, ray_address):
    """`awm serve --openenv --port 0` on the demo catalog, joined to the session's Ray cluster."""
    with openenv_server(store, ray_address, "--idle-timeout", str(IDLE_S)) as (url, _proc, line):
        yield url, line


def run_client(plan: dict) -> dict:
    if not OPENENV_PYTHON.is_file():
        pytest.fail(f"OpenEnv's client venv is missing: expected {OPENENV_PYTHON} (make openenv-venv)")
    done = subprocess.run([str(OPENENV_PYTHON), str(CLIENT), json.dumps(plan)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_openenv_clients_many_isolated_sessions(server):
    url, ready = server
    assert "judge code" in ready
    solution = json.loads((PROJECT_ROOT / "seeds" / "solutions" / f"{SCENARIO}.json").read_text())
    plan = {"url": url, "scenario": SCENARIO, "task_idx": TASK, "sessions": SESSIONS, "marker": "openenv-isolation",
            "write_tool": "create_issue", "tag_field": "title",
            "write_args": {"owner": "arivera", "repo": "pulse-api", "body": "written by one OpenEnv session"},
            "read_tool": "list_repository_issues", "read_args": {"owner": "arivera", "repo": "pulse-api"},
            "solution": next(t for t in solution["tasks"] if t["task_idx"] == TASK)}
    report = run_client(plan)
    assert not report["errors"], report["errors"]
    assert len(report["sessions"]) == SESSIONS
    for s in report["sessions"]:
        mine = f"openenv-isolation-{s['number']}"
        assert s["task"], s
        # the tools are the environment's own: no verify, no done among them
        assert "create_issue" in s["tools"] and "verify" not in s["tools"] and "done" not in s["tools"], s["tools"]
        assert s["seen_after_write"] == [mine], f"session {s['number']} saw {s['seen_after_write']}"  # isolated
        assert s["seen_after_reset"] == [], s  # reset restored the initial database
        assert "no verify tool" in s["verify"], s["verify"]
        assert s["done"] is True and s["outcome"] == "agent_error" and s["reward"] == 0.0, s
        assert s["state"]["step_count"] >= 2, s["state"]
    for s in report["sessions"][1::2]:  # GenericEnvClient: a reset parameter the server does not take is an error
        assert "unknown reset parameter(s) ['reward_config']" in s["bad_reset"], s["bad_reset"]
    for s in report["sessions"][::2]:  # MCPToolClient: nothing more once the episode is over
        assert "is over" in s["after_done"], s["after_done"]
    solved = report["solution"]
    assert solved["done"] is True and solved["reward"] == 1.0, solved
    assert solved["metadata"]["classification"] == "Completed" and solved["metadata"]["verifier"]["verdict"] == "complete"


def test_bad_reset_and_stateless_http(server):
    import urllib.error
    import urllib.request

    url, _ = server
    for path, method in (("/reset", "POST"), ("/step", "POST"), ("/state", "GET")):
        request = urllib.request.Request(url + path, data=b"{}" if method == "POST" else None, method=method)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 400 and "session" in err.value.read().decode()
    tasks = json.loads(urllib.request.urlopen(url + "/tasks", timeout=10).read())
    assert SCENARIO in tasks["scenarios"]

    def rpc(method: str, params: dict) -> dict:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        request = urllib.request.Request(url + "/mcp", data=body, headers={"content-type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=10).read())

    sid = rpc("openenv/session/create", {})["result"]["session_id"]
    assert "reset first" in rpc("tools/list", {"session_id": sid})["error"]["message"]
    assert "unknown session_id" in rpc("tools/call", {"session_id": "nope", "name": "x"})["error"]["message"]
    assert rpc("openenv/session/close", {"session_id": sid})["result"]["closed"] is True
    left = rpc("openenv/session/create", {})["result"]["session_id"]  # made, then left: closed once idle
    time.sleep(IDLE_S * 1.6)
    assert "idle past" in rpc("tools/list", {"session_id": left})["error"]["message"]
    assert json.loads(urllib.request.urlopen(url + "/health", timeout=10).read())["sessions"] == 0
