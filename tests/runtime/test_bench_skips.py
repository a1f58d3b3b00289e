"""`awm bench serve` on a scenario it cannot exercise (its schema offers no call to build)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


def _bench(store_root, *scenarios: str, ray_address: str, extra: list[str] = ()) -> subprocess.CompletedProcess:
    """The smallest run the CLI offers, on the session's Ray cluster (RAY_ADDRESS, as a user with a running
    cluster has it): a cluster of its own would cost every run a start and a stop."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.serve", "--json", "--quick",
         "--instances", "4", "--workload-instances", "2", "--baseline-instances", "1", "--hosts", "1",
         "--home", str(store_root), *extra, "--scenarios", *scenarios],
        capture_output=True, text=True, timeout=300, env={**os.environ, "RAY_ADDRESS": ray_address},
    )


@pytest.mark.slow
def test_nothing_to_exercise_is_a_clear_error(tmp_path, ray_address):
    """Only a scenario it cannot exercise: exit 2 naming it and why, no traceback. (A skipped scenario beside
    measured ones is in test_bench.py's run.)"""
    make_scenario(tmp_path, "search_only", UNCALLABLE_ENV)
    nothing = _bench(tmp_path, "search_only", ray_address=ray_address)
    assert nothing.returncode == 2
    assert "search_only" in nothing.stderr and "read-only tool" in nothing.stderr
    assert "Traceback" not in nothing.stderr
