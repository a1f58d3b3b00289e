"""One scenario per isolated worker (`awm_rl.runtime.worker`): a crash loses only its own scenario's
instances, an import that crashes is reported as such and quarantined after a few tries, and a slow
import is never killed by another caller's deadline."""

from __future__ import annotations

import json
import os
import threading
import time

import psutil
import pytest

from awm_rl.isolation.sandbox import sandbox_available
from awm_rl.runtime.actor import IMPORT_CRASH_LIMIT, IsolatedHost
from awm_rl.runtime.pool import EnvironmentLoadError, EnvironmentPool
from awm_rl.runtime.protocol import CallOp, OpError, ResetOp

from .conftest import BAD_ENV, make_scenario

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="scenario workers need bubblewrap (in-process "
                                "hosts share one process by design)")

CRASH_AT_IMPORT = BAD_ENV + '''
import sys as _sys
print("crash_env: about to exit at import", file=_sys.stderr, flush=True)
os._exit(3)
'''

SLOW_IMPORT = BAD_ENV + '''
time.sleep(5)
'''

EXIT_IN_HANDLER = BAD_ENV + '''

@app.get("/die", operation_id="die_hard")
async def die_hard():
    os._exit(7)
'''


@pytest.fixture(scope="module")
def worker_store(tmp_path_factory, corpus_store):
    root = tmp_path_factory.mktemp("worker_store")
    make_scenario(root, "notes_a", BAD_ENV)
    make_scenario(root, "dies_b", EXIT_IN_HANDLER)
    make_scenario(root, "crash_env", CRASH_AT_IMPORT)
    make_scenario(root, "slow_env", SLOW_IMPORT)
    src = corpus_store.scenario_dir("rover")
    make_scenario(root, "rover", (src / "server.py").read_text(), src / "initial.db")
    return root


@pytest.fixture(scope="module")
def one_host(worker_store):
    pool = EnvironmentPool(worker_store, num_hosts=1, prefetch=0, call_timeout_s=2.0)
    yield pool
    pool.close()


def _notes(pool, h) -> list[str]:
    r = pool.call_tool(h, "list_notes", {})
    assert r.ok, r
    return [n["text"] for n in json.loads(r.text)["notes"]]


def test_each_scenario_has_its_own_worker(one_host):
    a = one_host.acquire("notes_a")
    b = one_host.acquire("dies_b")
    try:
        stats = one_host.host_stats()[0]
        workers = stats["workers"]
        assert set(workers) >= {"notes_a", "dies_b"} and workers["notes_a"] != workers["dies_b"]
        for pid in (workers["notes_a"], workers["dies_b"]):
            assert psutil.Process(pid).name() == "bwrap"
        assert one_host.call_tool(a, "add_note", {"text": "a's note"}).ok
        assert one_host.call_tool(b, "add_note", {"text": "b's note"}).ok
        assert "b's note" not in _notes(one_host, a) and "a's note" not in _notes(one_host, b)
    finally:
        one_host.release(a)
        one_host.release(b)


def test_a_crash_loses_only_its_own_scenario(one_host):
    a = one_host.acquire("notes_a")
    b, b2 = one_host.acquire("dies_b"), one_host.acquire("dies_b")
    try:
        before = one_host.host_stats()[0]
        assert one_host.call_tool(a, "add_note", {"text": "survives"}).ok
        r = one_host.call_tool(b, "die_hard", {})
        assert not r.ok and r.error_kind == "environment"
        assert "dies_b" in r.text and "status 7" in r.text, r.text  # the cause, not "host crashed"
        lost = one_host.call_tool(b2, "list_notes", {})  # the same scenario's other instance is lost with it
        assert not lost.ok and lost.error_kind == "environment"
        assert "survives" in _notes(one_host, a)  # the other scenario's instance keeps its state
        after = one_host.host_stats()[0]
        assert after["pid"] == before["pid"] and after["incarnation"] == before["incarnation"]  # the actor lives
        one_host.reset(b)  # a fresh instance in a fresh worker
        assert _notes(one_host, b) == ["first", "second"]
        assert one_host.host_stats()[0]["workers"]["dies_b"] != before["workers"]["dies_b"]
    finally:
        for h in (a, b, b2):
            one_host.release(h)


def test_import_crash_is_reported_and_quarantined(one_host):
    messages = []
    for _ in range(IMPORT_CRASH_LIMIT + 1):
        with pytest.raises(EnvironmentLoadError) as err:
            one_host.acquire("crash_env")
        messages.append(str(err.value))
    for text in messages:
        assert "import failed" in text and "status 3" in text, text
        assert "about to exit at import" in text  # the worker's last words
        assert "crashed or restarted" not in text
    assert "quarantined" in messages[IMPORT_CRASH_LIMIT - 1] and "quarantined" in messages[-1]
    stats = one_host.host_stats()[0]
    assert stats["import_crashes"]["crash_env"] == IMPORT_CRASH_LIMIT  # no import after the quarantine
    assert "crash_env" in stats["quarantined"]
    h = one_host.acquire("notes_a")  # nothing else was affected
    try:
        assert _notes(one_host, h) == ["first", "second"]
    finally:
        one_host.release(h)


def test_slow_import_is_not_killed_by_another_callers_deadline(worker_store):
    """While one scenario imports for 5 s, calls to another scenario on the same host answer at once;
    their deadline (call 1 s + slack 1 s) would have had the host killed when one batch waited for another."""
    pool = EnvironmentPool(worker_store, num_hosts=1, prefetch=0, call_timeout_s=1.0, batch_slack_s=1.0)
    try:
        rover = pool.acquire("rover")
        pid = pool.host_stats()[0]["pid"]
        got: dict = {}

        def slow() -> None:
            try:
                got["handle"] = pool.acquire("slow_env")
            except Exception as exc:  # noqa: BLE001 - the thread hands any failure to the test
                got["error"] = exc

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.5)
        latencies = []
        while t.is_alive():
            t0 = time.monotonic()
            r = pool.call_tool(rover, "list_message_threads", {})
            latencies.append(time.monotonic() - t0)
            assert r.ok, r
            time.sleep(0.1)
        t.join()
        assert "error" not in got, got
        assert max(latencies) < 1.5, latencies
        assert _notes(pool, got["handle"]) == ["first", "second"]
        assert pool.host_stats()[0]["pid"] == pid  # the host was never restarted
    finally:
        pool.close()


def test_typed_operations(one_host):
    from awm_rl.runtime.pool import ToolCall
    from awm_rl.runtime.protocol import CallOp, CreateOp, OpenOp, ReleaseOp, ResetOp, TimedResult

    h = one_host.acquire("notes_a")
    try:
        results = one_host.call_many([ToolCall(h, "add_note", {"text": "typed"}), (h, "list_notes", {})])
        assert all(r.ok for r in results) and "typed" in results[1].text
    finally:
        one_host.release(h)
    assert one_host.num_hosts == 1
    created = one_host.run_timed(0, [CreateOp("notes_a", 2)])[0]
    assert isinstance(created, TimedResult) and created.ok and len(created.result) == 2
    iid = created.result[0]
    timed = one_host.run_timed(0, [OpenOp(iid), CallOp(iid, "add_note", {"text": "x"}), ResetOp(iid),
                                   CallOp(iid, "list_notes", {}), ReleaseOp(iid), ReleaseOp(created.result[1])])
    assert [t.ok for t in timed] == [True] * 6
    assert timed[1].wall_ms > 0 and "x" not in [n["text"] for n in json.loads(timed[3].result.text)["notes"]]


def test_operations_on_one_instance_keep_their_order(one_host):
    """The host runs concurrent batches in any order; the pool still delivers each instance's operations in the
    order they were queued (a later read sees every earlier write), however the queue is cut into batches."""
    handles = [one_host.acquire("notes_a") for _ in range(3)]
    one_host.max_batch = 1  # one operation per batch, two batches in flight: the most reordering chances
    try:
        calls = []
        for i in range(12):
            for h in handles:
                calls += [(h, "add_note", {"text": f"n{i}"}), (h, "list_notes", {})]
        results = one_host.call_many(calls)
        for k, ((_h, tool, _), res) in enumerate(zip(calls, results, strict=True)):
            assert res.ok, res.text
            if tool == "list_notes":
                seen = [n["text"] for n in json.loads(res.text)["notes"]]
                i = k // (2 * len(handles))
                assert [t for t in seen if t.startswith("n")] == [f"n{j}" for j in range(i + 1)], (k, seen)
    finally:
        one_host.max_batch = 64
        for h in handles:
            one_host.release(h)


def test_operations_without_a_worker_answer_each_on_its_own(tmp_path):
    """Operations on instances whose scenario has no worker on the host, and a malformed one, are answered one
    by one; the batch never raises (the pool would read that as a crashed host)."""
    saved = dict(os.environ)  # the host drops secret-looking variables from its own process
    host = IsolatedHost(str(tmp_path))
    try:
        call, reset, bogus = host.run_batch([CallOp("gone:ab:1", "t"), ResetOp("gone:ab:2"), ("bogus",)])
    finally:
        host.close()
        os.environ.update(saved)
    assert call.error_kind == "environment" and "not hosted here" in call.text, call
    assert isinstance(reset, OpError) and reset.kind == "unknown", reset
    assert isinstance(bogus, OpError) and "unknown operation 'bogus'" in bogus.message, bogus
