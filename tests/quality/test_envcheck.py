"""check_env_code: corpus environments pass (or fail for a real reason); bad code is reported, not fatal."""

from __future__ import annotations

import glob
import json
import os
import tempfile

import pytest

from awm_rl.quality.envcheck import check_env_code
from tests.runtime.conftest import BAD_ENV

CORPUS_ENVS = ["content_platform_1", "doordash_drive_delivery_tracking", "etsy_digital_downloads",
               "fortnite_item_shop", "gofundme", "rover"]


def _spec_ops(store, key):
    spec = store.read_json(key, "api_spec.json")
    return [e["operation_id"] for g in spec["api_groups"] for e in g["endpoints"]]


@pytest.mark.parametrize("key", CORPUS_ENVS)
def test_corpus_env_code_checks(corpus_store, key):
    folder = corpus_store.scenario_dir(key)
    code = (folder / "server.py").read_text()
    before = (folder / "initial.db").read_bytes()
    r = check_env_code(code, folder / "initial.db", expected_tools=_spec_ops(corpus_store, key))
    assert r.tools and r.lines_of_code == len(code.splitlines())
    assert r.missing_tools == []
    assert r.health_tool and r.health_status == 200, r
    assert r.import_ms and r.import_ms > 0
    assert r.accepts_database_url is True  # the published pipeline's code takes DATABASE_PATH as a sqlite:/// URL
    if key == "gofundme":
        # two handlers on POST /api/donation_intents: over HTTP the second can never be reached
        assert not r.ok
        assert r.shadowed_tools == {"create_recurring_donation_intent": "create_one_time_donation_intent"}
        assert "create_recurring_donation_intent" in r.error
    else:
        assert r.ok, r.error
    assert (folder / "initial.db").read_bytes() == before  # it ran on a copy


def test_bad_env_with_all_routes_imports(tmp_path):
    r = check_env_code(BAD_ENV, _db(tmp_path), expected_tools=["add_note", "list_notes", "not_there"])
    assert r.missing_tools == ["not_there"] and not r.ok
    assert "not_there" in r.error
    assert r.health_tool == "list_notes" and r.health_status == 200


@pytest.mark.parametrize("label,code,kw,expect", [
    ("hang", "while True:\n    pass\n", {"timeout_s": 2}, "did not finish importing within 2s"),
    ("sleep", "import time\ntime.sleep(600)\n", {"timeout_s": 2}, "did not finish importing within 2s"),
    ("sys_exit", "import sys\nsys.exit(4)\n", {}, "sys.exit(4)"),
    ("os_exit", "import os\nos._exit(7)\n", {}, "exited with status 7"),
    ("segfault", "import ctypes\nctypes.string_at(0)\n", {}, "SIGSEGV"),
    ("alloc", "hog = []\nwhile True:\n    hog.append(bytearray(32 * 2**20))\n", {"memory_mb": 256}, "out of memory"),
    ("raises", "x = 1\nraise ValueError('bad seed data')\n", {}, "ValueError: bad seed data"),
    ("syntax", "def f(:\n    pass\n", {}, "does not compile"),
    ("network", "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/', timeout=2)\n", {}, "may not use the network"),
    ("no_app", "x = 1\n", {}, "defines no FastAPI app"),
])
def test_bad_code_is_reported(tmp_path, monkeypatch, label, code, kw, expect):
    # A private temporary folder: other checks may run concurrently (awm quality) and use /tmp.
    private = tmp_path / "tempdir"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    r = check_env_code(code, _db(tmp_path), **kw)
    assert not r.ok
    assert expect in r.error, f"{label}: {r.error}"
    assert glob.glob(os.path.join(private, "awm-envcheck-*")) == []  # temp folder removed
    json.dumps(r.model_dump())  # storable as metadata


def test_traceback_names_the_line(tmp_path):
    code = "import os\n\n\ndef seed():\n    return {}['missing']\n\nseed()\n"
    r = check_env_code(code, _db(tmp_path))
    assert not r.ok and "KeyError" in r.error and "line 5" in r.error and "server.py" in r.error


def test_missing_database(tmp_path):
    r = check_env_code("x = 1\n", tmp_path / "nope.db")
    assert not r.ok and "initial database not found" in r.error


def _db(tmp_path):
    import sqlite3
    db = tmp_path / "initial.db"
    if not db.exists():
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        conn.close()
    return db


def test_generated_code_does_not_see_api_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("AWM_LLM_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    leak_check = "import os\nassert not [k for k in os.environ if k.endswith('API_KEY')], 'an API key leaked'\n"
    r = check_env_code(leak_check + BAD_ENV, _db(tmp_path), expected_tools=["add_note", "list_notes"])
    assert r.ok, r.error


@pytest.mark.parametrize("engine_line, accepts", [
    ('DATABASE_URL = DATABASE_PATH if "://" in DATABASE_PATH else f"sqlite:///{DATABASE_PATH}"\n'
     'engine = create_engine(DATABASE_URL)', True),  # what the env-code prompt asks for
    ('engine = create_engine(f"sqlite:///{DATABASE_PATH}")', False),  # path only: sqlite:///sqlite:///... for a URL
])
def test_the_database_path_form_is_reported(tmp_path, engine_line, accepts):
    """The published pipeline starts a server with DATABASE_PATH=sqlite:///<file>: the check says whether the code
    would open that file (stage metadata; the env_code quality check warns when it would not)."""
    code = ('import os\nfrom fastapi import FastAPI\nfrom sqlalchemy import create_engine, text\n'
            'DATABASE_PATH = os.getenv("DATABASE_PATH", "app.db")\n' + engine_line + '\napp = FastAPI()\n\n'
            '@app.get("/notes", operation_id="list_notes")\ndef list_notes():\n'
            '    with engine.connect() as conn:\n        return {"notes": conn.execute(text("SELECT count(*) FROM t")).scalar()}\n')
    r = check_env_code(code, _db(tmp_path))
    assert r.ok, r.error
    assert r.accepts_database_url is accepts


def test_the_workers_answer_bound_is_the_parents_setting(tmp_path, monkeypatch):
    """The worker runs in a clean environment and reads no settings: the bound on what may leave it comes from the
    parent's (here 300 bytes), as in a pool's hosts; a reference solution's call meets it."""
    monkeypatch.setenv("AWM_MAX_ANSWER_BYTES", "300")
    many = {"calls": [{"tool": "add_note", "arguments": {"text": "x" * 120}}] * 3
            + [{"tool": "list_notes", "arguments": {}}]}
    notes_only = BAD_ENV.split('@app.post("/leak"')[0]  # add_note and list_notes, none of the bad routes
    r = check_env_code(notes_only, _db(tmp_path), solutions={1: many}, snapshot_dir=tmp_path / "snap")
    listed = r.solutions["1"]["calls"][-1]
    assert listed["status"] >= 500 and "over the limit of 300 bytes (AWM_MAX_ANSWER_BYTES)" in listed["text"], listed
