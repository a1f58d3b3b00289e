"""`awm bench serve` on a scenario it cannot exercise: listed as skipped, the others measured."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from .conftest import make_scenario

# The only read tool needs a search term and its schema offers no example or default, so the
# benchmark cannot build a call for it.
UNCALLABLE_ENV = '''
import os
from fastapi import FastAPI, Query
from sqlalchemy import create_engine, text

engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///notes.db"), connect_args={"check_same_thread": False})
app = FastAPI(title="search only")


@app.get("/notes/search", operation_id="search_notes", summary="Search notes")
async def search_notes(q: str = Query(..., description="words to look for")):
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, text FROM notes WHERE text LIKE :q"), {"q": f"%{q}%"}).all()
    return {"notes": [dict(row._mapping) for row in rows]}
'''


def _bench(store_root, *scenarios: str) -> subprocess.CompletedProcess:
    """The smallest run the CLI offers."""
    return subprocess.run(
        [sys.executable, "-m", "awm_rl.runtime.commands", "bench-serve", "--json", "--quick",
         "--instances", "4", "--workload-instances", "2", "--baseline-instances", "1", "--hosts", "1",
         "--home", str(store_root), "--scenarios", *scenarios],
        capture_output=True, text=True, timeout=300,
    )


def test_unexercisable_scenario_is_skipped(corpus_store, tmp_path):
    make_scenario(tmp_path, "search_only", UNCALLABLE_ENV)
    shutil.copytree(corpus_store.scenario_dir("rover"), tmp_path / "scenarios" / "rover")  # the baseline needs its SQL

    measured = _bench(tmp_path, "search_only", "rover")
    assert measured.returncode == 0, measured.stderr[-3000:]
    report = json.loads(measured.stdout)
    assert report["scenarios"] == ["rover"]
    assert [s["scenario"] for s in report["skipped"]] == ["search_only"]
    assert "read-only tool" in report["skipped"][0]["reason"]
    assert list(report["ours"]["workload"]) == ["rover"]
    assert report["ours"]["call_ms_p50"] > 0 and report["baseline"]["call_ms_p50"] > 0

    nothing = _bench(tmp_path, "search_only")
    assert nothing.returncode == 2
    assert "search_only" in nothing.stderr and "read-only tool" in nothing.stderr
    assert "Traceback" not in nothing.stderr
