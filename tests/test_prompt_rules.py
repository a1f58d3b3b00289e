"""Each stage's prompt says what its checks enforce (issue 22, item 1): one test per rule, each running
the real check (verifier sandbox, do-nothing check, trial build, env check with the tool probe)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from awm_assets.synthesis import prompts
from awm_assets.synthesis.stages import _trial_build, do_nothing_check
from awm_resources.sqlite_build import SampleTable, SchemaTable
from awm_rl.isolation.verification import VerifierJob, run_verifiers
from awm_rl.isolation.verifier_worker import allowed_imports
from awm_rl.reward.audit import PROBE_ANSWERS

SCHEMA = [SchemaTable(name="users", ddl="CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT NOT NULL)"),
          SchemaTable(name="items", ddl="CREATE TABLE items (id INTEGER PRIMARY KEY, owner_id INTEGER NOT NULL "
                                        "REFERENCES users(id), title TEXT NOT NULL, due_date TEXT)")]


@pytest.fixture(scope="module")
def initial(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "initial.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT NOT NULL);"
                       "CREATE TABLE items (id INTEGER PRIMARY KEY, owner_id INTEGER, title TEXT, due_date TEXT);"
                       "INSERT INTO users VALUES (1, 'ada');"
                       "INSERT INTO items VALUES (1, 1, 'Fall Internship Application 2025', '2025-09-01'),"
                       " (2, 1, 'Budget', '2025-10-01'), (3, 1, 'Roadmap', NULL);")
    conn.commit()
    conn.close()
    return path


def _verifier_prompt() -> str:
    return prompts.verifier("s", 0, "How many items do I have?", "CREATE TABLE items (...)")[1]["content"]


def test_verifier_prompt_lists_exactly_the_sandbox_imports_and_they_import(initial):
    text = _verifier_prompt()
    assert f"importable (anything else fails the verifier): {', '.join(allowed_imports())}." in text
    assert "urllib.parse" in allowed_imports() and "ast" in allowed_imports()
    body = ("def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n"
            "    {imports}\n    return {{'result': 'others', 'reason': 'x'}}\n")
    cases = {"import urllib.parse, ast\n    ast.literal_eval('[1]'); urllib.parse.quote('a b')": True,
             "from urllib import parse": True, "from urllib import request": False, "import os": False}
    jobs = [VerifierJob(code=body.format(imports=imp), initial_db=initial, final_db=initial) for imp in cases]
    outcomes = run_verifiers(jobs, timeout_s=10)
    for (imports, allowed), out in zip(cases.items(), outcomes, strict=True):
        assert out.ok is allowed, (imports, out.error)
        if not allowed:
            assert out.error_kind == "forbidden_import"


READ_ONLY = '''
import sqlite3
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(f"file:{final_db_path}?mode=ro", uri=True)
    n = conn.execute("SELECT COUNT(*) FROM items WHERE owner_id = 1").fetchone()[0]
    found = bool(final_answer) and str(n) in final_answer
    return {"result": "complete" if found else "others", "reason": "answer checked", "count": n}
'''
UNCHANGED_IS_COMPLETE = READ_ONLY.replace('found = bool(final_answer) and str(n) in final_answer', 'found = n == 3')


def test_read_only_tasks_are_judged_by_the_answer_and_the_do_nothing_check_agrees(initial):
    text = _verifier_prompt()
    assert "An information-seeking task" in text and "the verdict rests on `final_answer`" in text
    assert all(("None" if a is None else a) in text for a in PROBE_ANSWERS)
    entries = [{"task_idx": 0, "code": READ_ONLY, "functions": ["verify_task_completion"]},
               {"task_idx": 1, "code": UNCHANGED_IS_COMPLETE, "functions": ["verify_task_completion"]}]
    errors: dict[str, list[str]] = {}
    assert do_nothing_check(entries, initial, errors, timeout_s=10) == {1}
    assert "task_0" not in errors
    # The vacuous verifier's feedback shows what it returned on the unchanged database.
    assert "final_answer=None" in errors["task_1"][0] and '"count": 3' in errors["task_1"][0]
    # A correct agent's answer passes the read-only verifier.
    ok = run_verifiers([VerifierJob(code=READ_ONLY, initial_db=initial, final_db=initial,
                                    final_answer="You have 3 items.")], timeout_s=10)[0]
    assert ok.verdict == "complete"


def test_sample_data_prompt_sets_no_upper_bound_and_the_build_takes_many_rows():
    text = prompts.sample_data("s", "d", ["t"], "schema")[1]["content"]
    assert "5 to 15" not in text and "no upper limit" in text
    rows = ["INSERT INTO users (id, username) VALUES (1, 'ada')"] + [
        f"INSERT INTO items (id, owner_id, title) VALUES ({i}, 1, 'item {i}')" for i in range(1, 44)]
    result, errors = _trial_build(SCHEMA, [SampleTable(table_name="users", insert_statements=rows[:1]),
                                           SampleTable(table_name="items", insert_statements=rows[1:])])
    assert errors == [] and result.rows == 44


# Env code as the env-code prompt now describes it: a create without body fields, an update whose body
# has only optional fields (one model, itself optional), foreign keys on through the one allowed PRAGMA,
# dates in TEXT columns mapped as String and normalised.
RULES_ENV = '''
import os
from datetime import datetime
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import Column, ForeignKey, Integer, String, create_engine, event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import declarative_base, sessionmaker

DATABASE_PATH = os.getenv("DATABASE_PATH", "app.db")
DATABASE_URL = DATABASE_PATH if "://" in DATABASE_PATH else f"sqlite:///{DATABASE_PATH}"
engine = create_engine(DATABASE_URL, connect_args={"check_same_thread": False})


@event.listens_for(engine, "connect")
def _foreign_keys(dbapi_connection, _record):
    dbapi_connection.execute("PRAGMA foreign_keys=ON")


Session = sessionmaker(bind=engine)
Base = declarative_base()
app = FastAPI()


class User(Base):
    __tablename__ = "users"
    id = Column(Integer, primary_key=True)
    username = Column(String, nullable=False)


class Item(Base):
    __tablename__ = "items"
    id = Column(Integer, primary_key=True)
    owner_id = Column(Integer, ForeignKey("users.id"))
    title = Column(String)
    due_date = Column(String)


Base.metadata.create_all(engine)


class ItemOut(BaseModel):
    id: int = Field(..., description="Item id", examples=[1])
    title: str | None = Field(None, description="Title", examples=["Budget"])
    due_date: str | None = Field(None, description="Due date", examples=["2025-10-01"])


class ItemPatch(BaseModel):
    title: str | None = Field(None, description="New title", examples=["Budget"])
    due_date: str | None = Field(None, description="New due date (ISO 8601)", examples=["2025-10-01"])


def out(item):
    return ItemOut(id=item.id, title=item.title, due_date=item.due_date)


@app.get("/items", operation_id="list_items", response_model=list[ItemOut])
def list_items():
    s = Session()
    try:
        return [out(i) for i in s.query(Item).order_by(Item.id)]
    finally:
        s.close()


@app.post("/items", operation_id="create_blank_item", response_model=ItemOut)
def create_blank_item():
    s = Session()
    try:
        item = Item(owner_id=1, title="Untitled")
        s.add(item)
        s.commit()
        return out(item)
    finally:
        s.close()


@app.patch("/items/{item_id}", operation_id="update_item", response_model=ItemOut)
def update_item(item_id: int, body: ItemPatch | None = None):
    s = Session()
    try:
        item = s.get(Item, item_id)
        if item is None:
            raise HTTPException(404, detail=f"item {item_id} not found")
        if body and body.title is not None:
            item.title = body.title
        if body and body.due_date is not None:
            try:
                item.due_date = datetime.fromisoformat(body.due_date).strftime("%Y-%m-%d")
            except ValueError:
                raise HTTPException(422, detail=f"due_date {body.due_date!r} is not an ISO 8601 date")
        try:
            s.commit()
        except IntegrityError as exc:
            s.rollback()
            raise HTTPException(422, detail=str(exc.orig))
        return out(item)
    finally:
        s.close()
'''


def test_env_code_rules_for_bodies_foreign_keys_and_text_dates_pass_the_env_check(initial, tmp_path):
    from awm_rl.quality.envcheck import check_env_code

    text = prompts.env_code("s", "d", "schema", {"api_groups": []})[1]["content"]
    assert "an endpoint without body fields takes no body parameter" in text
    assert "PRAGMA foreign_keys=ON" in text and "map those columns as `String`" in text
    solution = {"calls": [{"tool": "create_blank_item", "arguments": {}},
                          {"tool": "update_item", "arguments": {"item_id": 2, "due_date": "2025-11-30 09:00:00"}},
                          {"tool": "update_item", "arguments": {"item_id": 3}}], "final_answer": None}
    check = check_env_code(RULES_ENV, initial, probe=True, solutions={0: solution}, snapshot_dir=tmp_path)
    assert check.ok, check.error
    assert {n: t["status"] for n, t in check.probe.items() if t["status"] not in ("ok", "client_error_only")} == {}
    assert [c["status"] for c in check.solutions["0"]["calls"]] == [200, 200, 200]
    final = sqlite3.connect(check.solutions["0"]["final_db"])
    assert final.execute("SELECT due_date FROM items WHERE id = 2").fetchone() == ("2025-11-30",)
    assert final.execute("PRAGMA foreign_key_check").fetchall() == []


# ------------------------------------------------------------------ what the answer needs (item 2)

def test_prompts_carry_the_tools_and_the_rows_the_task_names(tmp_path):
    from awm_assets.synthesis.context import TOOLS_FILE, task_rows, tool_specs
    from awm_assets.synthesis.stages import with_task_rows
    from awm_resources.sqlite_build import database_excerpt
    from awm_resources.store import ArtifactStore

    folder = tmp_path / "scenarios" / "rules"
    folder.mkdir(parents=True)
    (folder / "server.py").write_text(RULES_ENV)
    (folder / "api_spec.json").write_text(json.dumps({"api_groups": [{"group_name": "items", "endpoints": [
        {"operation_id": "list_items", "response": {"items": [{"id": "int", "title": "str"}]}}]}]}))
    conn = sqlite3.connect(folder / "initial.db")
    conn.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT NOT NULL);"
                       "CREATE TABLE items (id INTEGER PRIMARY KEY, owner_id INTEGER, title TEXT, due_date TEXT);"
                       "INSERT INTO users VALUES (1, 'ada');")
    conn.executemany("INSERT INTO items VALUES (?, 1, ?, NULL)",
                     [(i, f"Form {i}") for i in range(1, 40)] + [(40, "Fall Internship Application 2025")])
    conn.commit()
    conn.close()
    store = ArtifactStore(tmp_path)
    task = 'Set the due date of the form "Fall Internship Application 2025" to 2025-12-01.'
    head = database_excerpt(folder / "initial.db", max_chars=8000)
    assert "Fall Internship" not in head  # the head of the table misses the row the task names
    assert "40 | 1 | Fall Internship Application 2025" in task_rows(folder / "initial.db", task)
    tools = tool_specs(store, "rules")
    assert {t["name"] for t in tools} == {"list_items", "create_blank_item", "update_item"}
    assert store.has("rules", TOOLS_FILE) and tool_specs(store, "rules") == tools  # cached per server code
    text = prompts.verifier("rules", 0, task, "schema", None, with_task_rows(head, folder / "initial.db", task),
                            tools)[1]["content"]
    assert "Rows holding values the task mentions:" in text and "Fall Internship Application 2025" in text
    update = next(t for t in tools if t["name"] == "update_item")
    assert 'returns: {"items": [{"id": "int"' in text
    assert "- update_item:" in text and '"due_date"' in text and "item_id" in str(update["input_schema"])
