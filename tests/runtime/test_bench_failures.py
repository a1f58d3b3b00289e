"""`awm bench serve` on environments built to fail, beside one good corpus scenario, in one run: each failure
is named in the report (scenario, side, phase, what happened), left out on both sides, and the good one is
measured. No traceback, exit 0.

Each bad environment fails on one side only, so that side is the one that meets it whatever the order of the
phases: `STANDALONE` is true when the file runs as the published server (`python server.py`, the baseline) and
false when the pool imports it (ours).
"""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import BROKEN_ENV, make_scenario
from .test_bench_skips import _bench

FAILING_ENV = '''
import os, time
from fastapi import FastAPI, Query
from fastapi.responses import PlainTextResponse
from sqlalchemy import create_engine, text

STANDALONE = __name__ == "__main__"
MODE, AFTER = "@MODE@", @AFTER@  # how it fails, and after how many answered calls
if MODE == "no_start" and STANDALONE:
    raise RuntimeError("port 8000 is taken")
engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///notes.db"), connect_args={"check_same_thread": False})
app = FastAPI(title="fails: " + MODE)
calls = 0


@app.get("/notes", operation_id="list_notes", summary="List notes")
async def list_notes(limit: int = Query(10, ge=1, le=100)):
    global calls
    calls += 1
    if calls > AFTER:
        if MODE == "exit" and STANDALONE:
            os._exit(3)  # the server process dies mid-run
        if MODE == "hang" and STANDALONE:
            time.sleep(3600)  # blocks the event loop: the whole server stops answering
        if MODE == "garbage" and STANDALONE:
            return PlainTextResponse("<html>oops</html>")
        if MODE == "exit_in_pool" and not STANDALONE:
            os._exit(3)  # our scenario worker dies mid-run
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, text FROM notes ORDER BY id LIMIT :n"), {"n": limit}).all()
    return {"notes": [dict(row._mapping) for row in rows]}


if __name__ == "__main__":
    import uvicorn
    uvicorn.run(app, host=os.getenv("HOST", "127.0.0.1"), port=int(os.getenv("PORT", "8000")))
'''

# scenario -> (mode, calls answered before it fails); "exit" outlives the baseline's latency calls (at most
# 50 spread over every read tool of every server) and dies in its throughput run
FAILING = {"dies": ("exit", 30), "hangs": ("hang", 0), "garbage": ("garbage", 0), "no_start": ("no_start", 0),
           "dies_in_pool": ("exit_in_pool", 3)}


@pytest.mark.slow
def test_failures_are_reported_and_left_out(corpus_store, tmp_path, ray_address):
    shutil.copytree(corpus_store.scenario_dir("rover"), tmp_path / "scenarios" / "rover")
    for key, (mode, after) in FAILING.items():
        make_scenario(tmp_path, key, FAILING_ENV.replace("@MODE@", mode).replace("@AFTER@", str(after)))
    make_scenario(tmp_path, "broken", BROKEN_ENV)
    res = _bench(tmp_path, "rover", *FAILING, "broken", ray_address=ray_address, extra=["--call-timeout", "3"])
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout)

    assert report["scenarios"] == ["rover"]
    assert report["ours"]["scenarios"] == ["rover"] and set(report["ours"]["workload"]) == {"rover"}
    for side in ("ours", "baseline"):
        assert report[side]["call_ms_p50"] > 0 and report[side]["throughput_calls_per_s"] > 0
        assert set(report[side]["cold_start_ms_by_scenario"]) == {"rover"}
    assert report["ours"]["workload_ok_calls"] == report["ours"]["workload_calls"] > 0
    left = {e["scenario"]: e for e in report["left_out"]}
    assert set(left) == {*FAILING, "broken"}, report["left_out"]
    expected = {  # scenario -> (side, phase, words of what happened)
        "dies": ("baseline", "throughput", "server exited with status 3 during throughput after 30 calls"),
        "hangs": ("baseline", "latency", "no answer within 3 s during latency after 0 calls"),
        "garbage": ("baseline", "latency", "not JSON"),
        "no_start": ("baseline", "start", "server exited with status 1 before answering"),
        "dies_in_pool": ("ours", "reset", "exited with status 3"),
        "broken": ("ours", "start", "ZeroDivisionError"),
    }
    for key, (side, phase, words) in expected.items():
        assert (left[key]["side"], left[key]["phase"]) == (side, phase) and words in left[key]["what"], left[key]
    assert "port 8000 is taken" in left["no_start"]["what"]
    # the baseline's all-at-once phases ran with "dies", which died there: they ran again with rover alone
    assert report["runs"] == {"baseline": 2, "ours": 1}
    assert report["baseline"]["instances"] == 1 and report["baseline"]["reset_sql"] == {"rover": "schema.sql"}
