"""Issue 38 item 7: a fixed clock per environment version.

AgentWorldModel-1K sample data is written relative to SQLite's 'now' (`datetime('now', '-1 days')`), and
generated servers and verifiers read the wall clock. With the environment's clock stored in its database,
two imports of the same environment (a second apart here, so any wall-clock 'now' would differ) hold the
same rows and the same version digest, and the server, SQLite in every instance and the verifiers see the
environment's "now", not today's.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from pathlib import Path

import pytest

from awm_resources.clock import CLOCK_FILE, IMPORT_NOW, file_clock, sql_now
from awm_resources.interop import import_awm_dir
from awm_resources.provenance import environment_digest
from awm_resources.store import ArtifactStore

AWM1K = Path(__file__).resolve().parents[2].parent / "shared" / "real-model-agent" / "awm1k"
SCENARIO = "banking_fintech_2"

SERVER = '''
import os
from datetime import date, datetime

from fastapi import FastAPI
from sqlalchemy import create_engine, text

engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///clock.db"))
app = FastAPI()


@app.get("/now", operation_id="what_time_is_it", summary="The server's and the database's now")
def what_time_is_it():
    with engine.connect() as conn:
        sql = conn.execute(text("SELECT datetime('now'), date('now', '-130 days'), strftime('%Y', 'now')")).one()
    return {"utcnow": datetime.utcnow().isoformat(), "now": datetime.now().isoformat(),
            "today": date.today().isoformat(), "sql": list(sql)}
'''

VERIFIER = '''
import sqlite3
from datetime import date, datetime


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(f"file:{initial_db_path}?mode=ro", uri=True)
    sql_now = conn.execute("SELECT datetime('now'), julianday('now') - julianday('2026-02-09 12:00:00')").fetchone()
    conn.close()
    return {"result": "complete", "utcnow": datetime.utcnow().isoformat(), "today": date.today().isoformat(),
            "sql_now": sql_now[0], "days_since": sql_now[1]}
'''


def _rows(db: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def two_imports(tmp_path_factory) -> tuple[ArtifactStore, ArtifactStore]:
    if not AWM1K.is_dir():
        pytest.fail(f"the AWM-1K environments are missing at {AWM1K} (../shared/real-model-agent/awm1k)")
    first = ArtifactStore(tmp_path_factory.mktemp("first"))
    import_awm_dir(AWM1K, first)
    time.sleep(1.1)  # a later second: SQLite's wall-clock 'now' would write other rows
    second = ArtifactStore(tmp_path_factory.mktemp("second"))
    import_awm_dir(AWM1K, second)
    return first, second


def test_the_same_environment_imported_twice_is_the_same_version(two_imports):
    first, second = two_imports
    for scenario in ("banking_fintech_2", "crowdfunding_platform_1"):
        assert _rows(first.path(scenario, "initial.db")) == _rows(second.path(scenario, "initial.db"))
        assert environment_digest(first, scenario) == environment_digest(second, scenario)
    # The sample data's 'now' is the environment's: `datetime('now', '-1 days')` is the day before it.
    assert file_clock(first.path(SCENARIO, "initial.db")) == IMPORT_NOW
    assert json.loads(first.read_text(SCENARIO, CLOCK_FILE)) == {"now": sql_now(IMPORT_NOW), "source": "imported"}
    sample = first.read_text(SCENARIO, "sample.sql")
    assert "datetime('now', '-1 days')" in sample
    day_before = sql_now(IMPORT_NOW - dt.timedelta(days=1))
    rows = _rows(first.path(SCENARIO, "initial.db"))
    assert any(day_before in row for table in rows.values() for row in table), "no row dated the day before"


def test_server_sqlite_and_verifier_see_the_environments_now(two_imports, tmp_path):
    from awm_rl.isolation.verification import VerifierJob, run_verifiers
    from awm_rl.quality.envcheck import check_env_code

    store = two_imports[0]
    # A copy of the imported database carries its clock (the SQLite header), so does every instance of it.
    check = check_env_code(SERVER, store.path(SCENARIO, "initial.db"), timeout_s=60, snapshot_dir=tmp_path,
                           solutions={0: {"calls": [{"tool": "what_time_is_it", "arguments": {}}]}})
    run = check.solutions["0"]
    [call] = run["calls"]
    assert call["status"] == 200, call
    seen = json.loads(call["text"])
    assert seen == {"utcnow": IMPORT_NOW.isoformat(), "now": IMPORT_NOW.isoformat(),
                    "today": IMPORT_NOW.date().isoformat(),
                    "sql": [sql_now(IMPORT_NOW), (IMPORT_NOW - dt.timedelta(days=130)).date().isoformat(),
                            str(IMPORT_NOW.year)]}
    assert file_clock(run["initial_db"]) == IMPORT_NOW and file_clock(run["final_db"]) == IMPORT_NOW

    [outcome] = run_verifiers([VerifierJob(code=VERIFIER, initial_db=Path(run["initial_db"]),
                                           final_db=Path(run["final_db"]))], timeout_s=20)
    assert outcome.ok, outcome
    assert outcome.result == {"result": "complete", "utcnow": IMPORT_NOW.isoformat(),
                              "today": IMPORT_NOW.date().isoformat(), "sql_now": sql_now(IMPORT_NOW),
                              "days_since": 1.0}

    # A database without a clock (built before this change) keeps the wall clock, in the server as before.
    plain = tmp_path / "plain.db"
    sqlite3.connect(plain).close()
    check = check_env_code(SERVER, plain, timeout_s=60, snapshot_dir=tmp_path / "plain",
                           solutions={0: {"calls": [{"tool": "what_time_is_it", "arguments": {}}]}})
    seen = json.loads(check.solutions["0"]["calls"][0]["text"])
    assert seen["today"] == dt.datetime.now(dt.timezone.utc).date().isoformat() != IMPORT_NOW.date().isoformat()


STAMPED_SERVER = '''
import os

from fastapi import FastAPI
from sqlalchemy import create_engine, text

engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///clock.db"))
app = FastAPI()


@app.post("/notes", operation_id="add_note", summary="Add a note; the database stamps it")
def add_note(body: str):
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": body})
        return {"created_at": conn.execute(text("SELECT created_at FROM notes ORDER BY id DESC LIMIT 1")).scalar()}
'''


def test_current_timestamp_defaults_read_the_clock_in_the_build_and_in_every_instance(tmp_path):
    from awm_resources.clock import fixed_clock_sql
    from awm_resources.sqlite_build import SampleTable, SchemaTable, build_database
    from awm_rl.quality.envcheck import check_env_code

    now = dt.datetime(2025, 3, 1, 9, 30)
    assert fixed_clock_sql("SELECT CURRENT_DATE, 'CURRENT_TIMESTAMP' FROM t") == \
        "SELECT (date('now')), 'CURRENT_TIMESTAMP' FROM t"  # string literals are left alone
    table = SchemaTable(name="notes", ddl="CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, "
                                          "created_at TEXT DEFAULT CURRENT_TIMESTAMP, day TEXT DEFAULT CURRENT_DATE)")
    sample = SampleTable(table_name="notes", insert_statements=[
        "INSERT INTO notes (id, body) VALUES (1, 'seeded')",
        "INSERT INTO notes (id, body, created_at) VALUES (2, 'stamped', datetime('now', '-130 days'))"])
    result = build_database(tmp_path / "initial.db", [table], [sample], now=now)
    assert result.failures == [] and file_clock(tmp_path / "initial.db") == now
    assert _rows(tmp_path / "initial.db")["notes"] == [
        (1, "seeded", sql_now(now), now.date().isoformat()),
        (2, "stamped", sql_now(now - dt.timedelta(days=130)), now.date().isoformat())]
    check = check_env_code(STAMPED_SERVER, tmp_path / "initial.db", timeout_s=60, snapshot_dir=tmp_path / "runs",
                           solutions={0: {"calls": [{"tool": "add_note", "arguments": {"body": "new"}}]}})
    [call] = check.solutions["0"]["calls"]
    assert call["status"] == 200 and json.loads(call["text"]) == {"created_at": sql_now(now)}, call


DAY_SERVER = '''
import os
from datetime import date, datetime

from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import create_engine

engine = create_engine(os.getenv("DATABASE_PATH", "sqlite:///clock.db"))
app = FastAPI()


class Slot(BaseModel):  # date and datetime fields: the fixed classes must validate as the real ones
    day: date
    starts_at: datetime | None = None


@app.post("/slots", operation_id="book_slot", summary="Book a slot", response_model=Slot)
def book_slot(slot: Slot) -> Slot:
    return Slot(day=slot.day, starts_at=datetime.now())


@app.get("/agenda", operation_id="agenda_for_day", summary="The agenda of one day (today only)")
def agenda_for_day(day: str):
    if day != date.today().isoformat():
        raise RuntimeError(f"the probe's day {day} is not the server's today {date.today()}")
    return {"day": day, "items": []}
'''


def test_the_tool_probe_dates_by_the_environments_clock(tmp_path):
    from awm_resources.sqlite_build import SchemaTable, build_database
    from awm_rl.quality.envcheck import check_env_code

    table = SchemaTable(name="agenda", ddl="CREATE TABLE agenda (id INTEGER PRIMARY KEY, title TEXT)")
    build_database(tmp_path / "initial.db", [table], [], now=dt.datetime(2024, 7, 1, 8, 0))  # no dates stored
    check = check_env_code(DAY_SERVER, tmp_path / "initial.db", timeout_s=60, probe=True)
    assert check.probe["agenda_for_day"]["status"] == "ok", check.probe["agenda_for_day"]
    assert check.probe["book_slot"]["status"] == "ok", check.probe["book_slot"]
