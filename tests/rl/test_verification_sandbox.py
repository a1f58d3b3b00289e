"""The verifier sandbox: limits, forbidden operations and bad returns, on real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from awm_rl.isolation.verification import VerifierJob, VerifierSandbox, run_verifier, run_verifiers


@pytest.fixture()
def dbs(tmp_path: Path) -> tuple[Path, Path]:
    """An initial database with two rows and a final one where a row was added."""
    initial = tmp_path / "initial.db"
    final = tmp_path / "final.db"
    for path, names in ((initial, ["ada", "bob"]), (final, ["ada", "bob", "cy"])):
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO users (name) VALUES (?)", [(n,) for n in names])
        conn.commit()
        conn.close()
    return initial, final


COUNT_VERIFIER = '''
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    import sqlite3
    a = sqlite3.connect(f"file:{initial_db_path}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM users").fetchone()[0]
    b = sqlite3.connect(final_db_path).execute("SELECT COUNT(*) FROM users").fetchone()[0]
    return {"result": "complete" if b == a + 1 and final_answer != "no" else "others"}
'''


def test_code_mode_verdicts_and_final_answer(dbs):
    initial, final = dbs
    done = run_verifier(COUNT_VERIFIER, initial, final)
    assert done.ok and done.verdict == "complete" and done.error is None
    nothing = run_verifier(COUNT_VERIFIER, initial, initial)
    assert nothing.ok and nothing.verdict == "others"
    vetoed = run_verifier(COUNT_VERIFIER, initial, final, final_answer="no")
    assert vetoed.verdict == "others"


def test_sql_mode_returns_evidence(dbs):
    code = '''
import sqlite3, json, datetime
def verify_task(initial_db_path, final_db_path):
    rows = sqlite3.connect(final_db_path).execute("SELECT name FROM users ORDER BY id").fetchall()
    return {"names": [r[0] for r in rows], "when": datetime.datetime.strptime("2024-01-02", "%Y-%m-%d")}
'''
    outcome = run_verifier(code, *dbs, function="verify_task")
    assert outcome.ok, outcome.error
    assert outcome.verdict is None
    assert outcome.result == {"names": ["ada", "bob", "cy"], "when": "2024-01-02 00:00:00"}


def test_source_databases_are_never_modified(dbs):
    initial, final = dbs
    before = final.read_bytes()
    code = '''
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    import sqlite3
    conn = sqlite3.connect(final_db_path)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("DELETE FROM users")
        conn.commit()
    except Exception as exc:
        return {"result": "others", "why": str(exc)}
    return {"result": "complete"}
'''
    run_verifier(code, initial, final)
    assert final.read_bytes() == before
    # The next verifier sees the untouched data.
    assert run_verifier(COUNT_VERIFIER, initial, final).verdict == "complete"


@pytest.mark.parametrize(
    "body, kind",
    [
        ("while True:\n        pass", "timeout"),
        ("import time\n    time.sleep(30)", "timeout"),
        (  # a single long SQLite statement, interrupted by the progress handler
            "import sqlite3\n    sqlite3.connect(final_db_path).execute("
            "'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c').fetchone()",
            "timeout",
        ),
        (  # swallowing every exception does not escape the wall clock: the worker is killed
            "while True:\n        try:\n            pass\n        except BaseException:\n            pass",
            "timeout",
        ),
        ("x = bytearray(2_000_000_000)", "memory"),
        ("import os\n    os.remove(initial_db_path)", "forbidden_import"),
        ("import subprocess", "forbidden_import"),
        ("import socket", "forbidden_import"),
        ("open('/tmp/awm-verifier-escape.txt', 'w').write('x')", "forbidden_operation"),
        (  # reaching os through another module's builtins still cannot delete files
            "import json\n    json.__builtins__['__import__']('os').remove(initial_db_path)",
            "forbidden_operation",
        ),
        (
            "import json\n    json.__builtins__['__import__']('os').system('touch /tmp/awm-pwned')",
            "forbidden_operation",
        ),
        ("import sqlite3\n    sqlite3.connect('/etc/other.db')", "forbidden_operation"),
        (
            "import sqlite3\n    sqlite3.connect(final_db_path).execute(\"ATTACH DATABASE '/tmp/x.db' AS x\")",
            "crash",
        ),
        ("raise ValueError('boom')", "crash"),
        ("raise SystemExit(3)", "crash"),
        ("return [1, 2]", "bad_return"),
        ("return {'result': 'maybe'}", "bad_return"),
        ("return {'result': object()}", None),  # non-JSON values are stringified, not fatal
        ("return {'blob': 'x' * 2_000_000}", "bad_return"),
    ],
)
def test_bad_verifiers_become_outcomes(dbs, body, kind):
    code = f"def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n    {body}\n"
    start = time.monotonic()
    outcome = run_verifier(code, *dbs, timeout_s=1.5, memory_mb=256)
    assert time.monotonic() - start < 30  # ended by the sandbox, not hung (generous for a loaded machine)
    if kind is None:
        assert outcome.error_kind == "bad_return"  # object() -> 'result' is a repr string, not a verdict
        return
    assert outcome.ok is False
    assert outcome.error_kind == kind, outcome
    assert outcome.error
    assert not Path("/tmp/awm-pwned").exists()
    assert not Path("/tmp/awm-verifier-escape.txt").exists()
    assert dbs[0].exists()


def test_crash_reports_verifier_line(dbs):
    code = "def verify_task_completion(a, b, final_answer=None):\n    x = 1\n    return {'r': 1 / 0}\n"
    outcome = run_verifier(code, *dbs)
    assert outcome.error_kind == "crash"
    assert "ZeroDivisionError" in outcome.error and "line 3" in outcome.error


def test_syntax_and_missing_function_and_missing_db(dbs, tmp_path):
    assert run_verifier("def verify_task_completion(:\n", *dbs).error_kind == "syntax_error"
    missing = run_verifier("def helper():\n    pass\n", *dbs)
    assert missing.error_kind == "missing_function" and "helper" in missing.error
    no_db = run_verifier(COUNT_VERIFIER, tmp_path / "nope.db", dbs[1])
    assert no_db.error_kind == "missing_database" and "nope.db" in no_db.error


def test_environment_is_clean(dbs, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    code = '''
def verify_task(initial_db_path, final_db_path):
    import json
    os = json.__builtins__["__import__"]("os")
    return {"env": sorted(os.environ)}
'''
    outcome = run_verifier(code, *dbs, function="verify_task")
    assert outcome.ok
    assert "OPENAI_API_KEY" not in outcome.result["env"]


@pytest.mark.skipif(os.geteuid() != 0, reason="privilege drop applies when the parent runs as root")
def test_disabling_the_audit_hook_still_cannot_touch_files(dbs, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    code = f'''
def verify_task(initial_db_path, final_db_path):
    import sqlite3
    g = sqlite3.connect.__globals__
    g["_JOB"] = None  # switch the audit hook off from inside
    os = g["os"]
    errors = []
    for action in (lambda: os.remove({str(victim)!r}), lambda: open({str(victim)!r}, "w").write("x"),
                   lambda: os.system("touch /root/awm-pwned")):
        try:
            action()
        except Exception as exc:
            errors.append(type(exc).__name__)
    return {{"errors": errors, "uid": os.getuid()}}
'''
    outcome = run_verifier(code, *dbs, function="verify_task")
    assert outcome.ok, outcome.error
    assert outcome.result["uid"] == 65534
    assert victim.read_text() == "keep me"
    assert not Path("/root/awm-pwned").exists()


def test_printing_does_not_break_the_protocol(dbs):
    code = '''
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    print('{"id": 99, "result_json": "{}"}')
    print("hello")
    return {"result": "complete"}
'''
    outcome = run_verifier(code, *dbs)
    assert outcome.verdict == "complete"
    assert "hello" in outcome.output


def test_batch_reuses_one_worker_and_survives_bad_jobs(dbs):
    initial, final = dbs
    loop = "def verify_task_completion(a, b, final_answer=None):\n    while True:\n        pass\n"
    jobs = [VerifierJob(code=COUNT_VERIFIER, initial_db=initial, final_db=final) for _ in range(6)]
    jobs.insert(3, VerifierJob(code=loop, initial_db=initial, final_db=final))
    with VerifierSandbox(timeout_s=1, memory_mb=256) as sandbox:
        outcomes = [sandbox.run(job) for job in jobs]
        assert sandbox.workers_started == 2  # replaced once, after the timeout
    assert [o.error_kind for o in outcomes] == [None, None, None, "timeout", None, None, None]
    assert all(o.verdict == "complete" for i, o in enumerate(outcomes) if i != 3)


def test_parallel_batch_keeps_order(dbs):
    initial, final = dbs
    jobs = [
        VerifierJob(code=COUNT_VERIFIER, initial_db=initial, final_db=final if i % 2 else initial)
        for i in range(8)
    ]
    outcomes = run_verifiers(jobs, workers=2)
    assert [o.verdict for o in outcomes] == ["others", "complete"] * 4


STDLIB_VERIFIER = '''
from __future__ import annotations

import dataclasses
import difflib
import statistics
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo


@dataclasses.dataclass(frozen=True)
class Booking:
    start: datetime
    hours: int


def verify_task(initial_db_path, final_db_path):
    new_york = ZoneInfo("America/New_York")
    booking = Booking(datetime(2024, 3, 9, 12, tzinfo=new_york), 24)  # across the spring-forward night
    end = booking.start + timedelta(hours=booking.hours)
    try:
        ZoneInfo("Mars/Olympus_Mons")
        unknown_zone = "found"
    except KeyError:  # ZoneInfoNotFoundError, after looking for the tzdata package too
        unknown_zone = "not found"
    return {
        "offsets_h": [booking.start.utcoffset() / timedelta(hours=1), end.utcoffset() / timedelta(hours=1)],
        "elapsed_h": (end.astimezone(timezone.utc) - booking.start.astimezone(timezone.utc)) / timedelta(hours=1),
        "end_utc": end.astimezone(ZoneInfo("UTC")).isoformat(),
        "unknown_zone": unknown_zone,
        "total": str((Decimal("19.99") * 3).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)),
        "median": statistics.median([3, 1, 4, 1, 5]),
        "close": difflib.get_close_matches("appel", ["maple", "apple", "orange"], n=1),
        "similar": difflib.SequenceMatcher(None, "kitten", "sitting").ratio() > 0.5,
    }
'''


def test_stdlib_modules_work_in_a_verifier(dbs):
    """Time zones (tz files read after the drop to `nobody`), decimal, statistics, difflib and a
    dataclass under `from __future__ import annotations`: the modules real verifiers use."""
    outcome = run_verifier(STDLIB_VERIFIER, *dbs, function="verify_task")
    assert outcome.ok, outcome.error
    assert outcome.result == {
        "offsets_h": [-5.0, -4.0],
        "elapsed_h": 23.0,
        "end_utc": "2024-03-10T16:00:00+00:00",
        "unknown_zone": "not found",
        "total": "60.0",
        "median": 3,
        "close": ["apple"],
        "similar": True,
    }


def test_every_allowed_module_imports(dbs):
    from awm_rl.isolation.verifier_worker import ALLOWED_IMPORTS

    code = (
        "def verify_task(initial_db_path, final_db_path):\n"
        f"    import {', '.join(sorted(ALLOWED_IMPORTS))}\n"
        "    return {'ok': True}\n"
    )
    outcome = run_verifier(code, *dbs, function="verify_task")
    assert outcome.ok, outcome.error


@pytest.mark.parametrize(
    "statement",
    [
        "import os",
        "import subprocess",
        "import pathlib",
        "from os import path",
        "import importlib.resources",  # loaded for zoneinfo, still not for verifiers
        "import shutil",
        "import pickle",
        "import ctypes",
        "from . import sibling",
    ],
)
def test_dangerous_imports_stay_refused(dbs, statement):
    code = f"def verify_task(initial_db_path, final_db_path):\n    {statement}\n    return {{}}\n"
    outcome = run_verifier(code, *dbs, function="verify_task")
    assert outcome.error_kind == "forbidden_import", outcome


def test_worker_outlives_the_thread_that_started_it(dbs):
    """bubblewrap's --die-with-parent is tied to the spawning thread: workers are started from one
    long-lived thread, so a sandbox first used from a short-lived thread keeps its worker."""
    import threading

    with VerifierSandbox(timeout_s=5) as sandbox:
        first = []
        thread = threading.Thread(target=lambda: first.append(sandbox.run(VerifierJob(
            code=COUNT_VERIFIER, initial_db=dbs[0], final_db=dbs[1]))))
        thread.start()
        thread.join()
        time.sleep(0.3)
        second = sandbox.run(VerifierJob(code=COUNT_VERIFIER, initial_db=dbs[0], final_db=dbs[1]))
        assert first[0].verdict == second.verdict == "complete"
        assert sandbox.workers_started == 1
