"""Hostile environments and verifiers that only want to exhaust the machine: scratch space (the private
/tmp and /dev/shm are bounded tmpfs, a drip of empty files is counted, memfd and SysV shared memory are
refused, the check's on-disk folders are watched, socket buffers bounded by the descriptor limit), tool answers and requests over their limits, and
`awm serve` answering the next call after one that timed out or ended its worker. Small limits keep
every probe to a few MB."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import httpx
import pytest

from awm_rl.isolation.verification import run_verifier
from awm_rl.quality.envcheck import check_env_code
from awm_rl.runtime.actor import IsolatedHost
from awm_rl.runtime.protocol import CreateOp

from .test_verifier_attacks import hostile

EXHAUST_ENV = '''
import ctypes
import os
import time

from fastapi import FastAPI

app = FastAPI()


@app.get("/fill", operation_id="fill")
def fill(where: str = "/tmp", mb: int = 1, files: int = 0):
    """Write `mb` MB into one file under `where`, or `files` empty files; say how far it got."""
    done = 0
    try:
        if files:
            for done in range(files):
                open(f"{where}/f{done}", "w").close()
        else:
            with open(f"{where}/big", "wb") as fh:
                for done in range(mb):
                    fh.write(b"x" * 2**20)
        return {"done": done + 1}
    except OSError as exc:
        return {"done": done, "error": str(exc)}


@app.get("/shm", operation_id="shared_memory")
def shared_memory():
    """memfd, SysV shared memory and message queues: memory no tmpfs or address-space cap counts."""
    out = {}
    try:
        os.close(os.memfd_create("x"))
        out["memfd"] = "OK"
    except OSError as exc:
        out["memfd"] = f"FAILED {exc}"
    libc = ctypes.CDLL(None, use_errno=True)
    out["shmget"] = (libc.shmget(0, 1 << 30, 0o1600), ctypes.get_errno())
    out["msgget"] = (libc.msgget(0, 0o1600), ctypes.get_errno())
    return out


@app.get("/sockets", operation_id="fill_sockets")
def fill_sockets():
    """Socket pairs with full buffers until refused: kernel memory the address-space cap does not count."""
    import socket

    pairs, queued = [], 0
    try:
        while True:
            a, b = socket.socketpair()
            pairs.append((a, b))
            a.setblocking(False)
            try:
                while True:
                    queued += a.send(b"x" * 65536)
            except BlockingIOError:
                pass
    except OSError as exc:
        return {"pairs": len(pairs), "mb": queued >> 20, "error": str(exc)}
    finally:
        for a, b in pairs:
            a.close()
            b.close()


@app.get("/big", operation_id="big_answer")
def big_answer(mb: int = 2):
    return {"blob": "x" * (mb * 2**20)}


@app.post("/echo", operation_id="echo")
def echo(body: dict):
    return {"size": len(str(body))}


@app.get("/stuck", operation_id="stuck_in_a_thread")
def stuck_in_a_thread():
    time.sleep(3600)  # a sync handler: a worker thread nothing can interrupt


@app.get("/ping", operation_id="ping")
def ping():
    return {"pong": True}
'''


@pytest.fixture()
def small_limits(monkeypatch):
    monkeypatch.setenv("AWM_SCRATCH_MB", "8")
    monkeypatch.setenv("AWM_SCRATCH_FILES", "2000")
    monkeypatch.setenv("AWM_MAX_ANSWER_BYTES", str(1 << 20))
    monkeypatch.setenv("AWM_MAX_REQUEST_BYTES", str(1 << 20))


@pytest.fixture()
def store(tmp_path):
    from tests.runtime.conftest import make_scenario

    make_scenario(tmp_path / "store", "exhaust_env", EXHAUST_ENV)
    return tmp_path / "store"


def _call(host: IsolatedHost, iid: str, tool: str, args: dict):
    return host.call(iid, tool, args)


def test_host_worker_scratch_answers_and_requests_are_bounded(store, small_limits):
    host = IsolatedHost(str(store), call_timeout_s=5, memory_mb=1024)
    try:
        [iid] = host.run_batch([CreateOp("exhaust_env", 1)])[0]
        for where in ("/tmp", "/dev/shm"):
            seen = json.loads(_call(host, iid, "fill", {"where": where, "mb": 100}).text)
            assert seen["done"] <= 8 and "No space left" in seen["error"], (where, seen)
        assert "Read-only" in json.loads(_call(host, iid, "fill", {"where": "/dev", "mb": 1}).text)["error"]
        shm = json.loads(_call(host, iid, "shared_memory", {}).text)
        assert "Function not implemented" in shm["memfd"] and shm["shmget"] == [-1, 1] and shm["msgget"] == [-1, 1]
        sockets = json.loads(_call(host, iid, "fill_sockets", {}).text)
        assert sockets["pairs"] < 512 and sockets["mb"] < 130 and "Too many open files" in sockets["error"], sockets
        big = _call(host, iid, "big_answer", {"mb": 2})
        assert big.error_kind == "environment" and "over the limit of 1,048,576 bytes (AWM_MAX_ANSWER_BYTES)" in big.text
        assert len(big.text) < 300
        req = _call(host, iid, "echo", {"body": {"x": "y" * (2 << 20)}})
        assert req.status == 413 and "AWM_MAX_REQUEST_BYTES" in req.text, req.text[:300]
        assert _call(host, iid, "ping", {}).ok
        # a drip of empty files: bytes stay under the tmpfs size, inodes are counted from outside
        drip = _call(host, iid, "fill", {"files": 5000})  # ended during the call, or right after it
        time.sleep(1.0)
        lost = drip if not drip.ok else _call(host, iid, "ping", {})
        assert lost.error_kind == "environment" and "AWM_SCRATCH_FILES" in lost.text, (drip.text, lost.text)
        [fresh] = host.run_batch([CreateOp("exhaust_env", 1)])[0]  # a new worker serves the scenario
        assert _call(host, fresh, "ping", {}).ok
    finally:
        host.close()


def test_awm_serve_outlives_a_stuck_call_and_bounds_answers(store, small_limits):
    from fastmcp import Client

    from tests.runtime.serving import start_serve, stop_serve

    proc, url = start_serve(store, "exhaust_env", "--call-timeout", "1")
    try:
        async def other_session(started: asyncio.Event) -> tuple[bool, str]:
            async with Client(url, timeout=60) as client:
                await started.wait()
                await asyncio.sleep(0.3)  # queued behind the stuck call
                res = await client.call_tool("ping", {}, raise_on_error=False)
                return res.is_error, res.content[0].text

        async def main() -> dict:
            async with Client(url, timeout=60) as client:
                started = asyncio.Event()
                other = asyncio.create_task(other_session(started))
                stuck = asyncio.create_task(client.call_tool("stuck_in_a_thread", {}, raise_on_error=False))
                started.set()
                t = time.monotonic()
                stuck = await stuck
                took = time.monotonic() - t
                after = await client.call_tool("ping", {}, raise_on_error=False)
                big = await client.call_tool("big_answer", {"mb": 2}, raise_on_error=False)
                tmp = await client.call_tool("fill", {"mb": 100}, raise_on_error=False)
                return {"stuck": stuck.content[0].text, "stuck_error": stuck.is_error, "took": took,
                        "after": not after.is_error, "other": await other, "big": big.content[0].text,
                        "tmp": json.loads(tmp.content[0].text)}

        seen = asyncio.run(main())
        assert seen["stuck_error"] and "worker was replaced" in seen["stuck"], seen["stuck"]
        assert "reset to its initial state" in seen["stuck"]
        assert seen["took"] < 20 and seen["after"], seen
        assert seen["other"][0] is False or "reset" in seen["other"][1], seen["other"]
        assert "AWM_MAX_ANSWER_BYTES" in seen["big"] and len(seen["big"]) < 300
        assert "No space left" in seen["tmp"]["error"]
        too_big = httpx.post(url, content=b"x" * (2 << 20), headers={"content-type": "application/json"})
        assert too_big.status_code == 413 and "AWM_MAX_REQUEST_BYTES" in too_big.text
        assert proc.poll() is None
    finally:
        stop_serve(proc)


CHECK_TMP = EXHAUST_ENV.replace("app = FastAPI()", '''app = FastAPI()
try:
    with open("/tmp/fill", "wb") as fh:
        for _ in range(100):
            fh.write(b"x" * 2**20)
    TMP = "wrote 100 MB"
except OSError as exc:
    TMP = str(exc)


@app.get("/status", operation_id="get_a_status")
def get_a_status():
    return {"tmp": TMP}
''')
CHECK_DISK = EXHAUST_ENV.replace("app = FastAPI()", '''app = FastAPI()
for i in range(50):  # 4 MB files into the check's folder on disk (each under the per-file limit)
    with open(f"drip{i}", "wb") as fh:
        fh.write(b"x" * (4 << 20))
    time.sleep(0.05)
''')

CHECK_DRIP = EXHAUST_ENV.replace("app = FastAPI()", '''app = FastAPI()
for i in range(100_000):  # empty files: no tmpfs space, ~1 KB of kernel memory each
    open(f"/tmp/d{i}", "w").close()
time.sleep(5)
''')


@pytest.mark.parametrize("case", ["tmp", "disk", "drip"])
def test_env_check_scratch_is_bounded(tmp_path, small_limits, case):
    db = tmp_path / "initial.db"
    sqlite3.connect(db).close()
    result = check_env_code({"tmp": CHECK_TMP, "disk": CHECK_DISK, "drip": CHECK_DRIP}[case], db, timeout_s=20)
    assert "8 MB" in result.scratch, result.scratch
    if case == "drip":
        assert not result.ok and "over the limit of 2,000 (AWM_SCRATCH_FILES)" in result.error, result.error
    elif case == "tmp":
        # the tmpfs size, or first RLIMIT_FSIZE (a file no bigger than the folders' limit)
        assert result.ok and ("No space left" in result.health_text or "File too large" in result.health_text), result
    else:
        assert not result.ok and "over the limit of 8 MB (AWM_SCRATCH_MB_CHECK)" in result.error, result.error


def test_verifier_scratch_is_bounded(dbs_for_verifier, small_limits):
    code = hostile('''
try:
    with open("/tmp/fill", "wb") as fh:
        for _ in range(100):
            fh.write(b"x" * 2**20)
    return {"tmp": "wrote 100 MB"}
except OSError as exc:
    return {"tmp": str(exc)}
''')
    outcome = run_verifier(code, *dbs_for_verifier, function="verify_task")
    assert outcome.ok and ("No space left" in str(outcome.result) or "File too large" in str(outcome.result)), outcome


@pytest.fixture()
def dbs_for_verifier(tmp_path):
    db = tmp_path / "db.sqlite"
    sqlite3.connect(db).close()
    return db, db


def test_limits_are_settings_that_name_a_bad_value(monkeypatch):
    from awm_resources import settings

    monkeypatch.setenv("AWM_SCRATCH_MB", "32")
    monkeypatch.setenv("AWM_SCRATCH_MB_CHECK", "256")
    assert (settings.scratch_mb("host"), settings.scratch_mb("check")) == (32, 256)  # a role's own wins
    monkeypatch.setenv("AWM_MAX_ANSWER_BYTES", "1MB")
    with pytest.raises(ValueError, match="AWM_MAX_ANSWER_BYTES must be an integer, got '1MB'"):
        settings.max_answer_bytes()
    monkeypatch.setenv("AWM_WORKER_FDS", "0")
    with pytest.raises(ValueError, match="AWM_WORKER_FDS must be a positive integer"):
        settings.worker_fds()
    with pytest.raises(ValueError, match="unknown scratch role 'trainer'"):
        settings.scratch_mb("trainer")
