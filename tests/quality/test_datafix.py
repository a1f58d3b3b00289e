"""Data changes for tasks whose target the seed already holds (`awm_assets/synthesis/datafix.py`): what is
refused before anything runs, and what a kept change leaves in the store (a rebuild gives the same data)."""

from __future__ import annotations

import sqlite3

from awm_assets.synthesis.datafix import apply_statements, commit_data_changes
from awm_resources.sqlite_build import SampleTable, SchemaTable, build_database
from awm_resources.store import ArtifactStore

TABLES = [SchemaTable(name="users", ddl="CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)"),
          SchemaTable(name="notes", ddl="CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL "
                                        "REFERENCES users(id), text TEXT)")]
SAMPLES = [SampleTable(table_name="users", insert_statements=["INSERT INTO users (id, name) VALUES (1, 'ada')",
                                                              "INSERT INTO users (id, name) VALUES (2, 'bob')"]),
           SampleTable(table_name="notes", insert_statements=["INSERT INTO notes (id, user_id, text) VALUES (1, 1, 'x')"])]


def _rows(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM users ORDER BY id").fetchall()
    finally:
        conn.close()


def test_a_failure_writes_nothing(tmp_path):
    db = tmp_path / "x.db"
    build_database(db, TABLES, SAMPLES)
    errors = apply_statements(db, ["UPDATE users SET name = 'zed' WHERE id = 2", "DELETE FROM users WHERE id = 1"])
    assert "FOREIGN KEY constraint failed" in errors[0] and "statement 2" in errors[0]
    assert _rows(db) == [(1, "ada"), (2, "bob")]  # the first statement was rolled back with it


def test_a_kept_change_is_applied_logged_and_rebuilds_the_same_database(tmp_path):
    store = ArtifactStore(tmp_path)
    store.write_json("s", "sample.json", {"tables": [t.model_dump() for t in SAMPLES]})
    build_database(store.path("s", "initial.db"), TABLES, SAMPLES)
    commit_data_changes(store, "s", [{"task_idx": 3, "statements": ["UPDATE users SET name = 'bob (old)' WHERE id = 2"],
                                      "diagnosis": "bob already exists"}])
    assert _rows(store.path("s", "initial.db")) == [(1, "ada"), (2, "bob (old)")]
    assert _rows(store.path("s", "initial.original.db")) == [(1, "ada"), (2, "bob")]
    assert store.read_json("s", "data_changes.json")["changes"][0]["task_idx"] == 3
    assert "UPDATE users SET name = 'bob (old)' WHERE id = 2;" in store.read_text("s", "sample.sql")
    samples = [SampleTable.model_validate(t) for t in store.read_json("s", "sample.json")["tables"]]
    build_database(tmp_path / "rebuilt.db", TABLES, samples)
    assert _rows(tmp_path / "rebuilt.db") == _rows(store.path("s", "initial.db"))


def test_inserts_add_presupposed_rows_and_other_statements_are_refused(tmp_path):
    """A task blocked by data (a row it presupposes is missing) is repaired by INSERTs; anything but UPDATE,
    DELETE or INSERT is refused before it runs, and an INSERT breaking a foreign key writes nothing."""
    db = tmp_path / "x.db"
    build_database(db, TABLES, SAMPLES)
    assert "not an UPDATE, DELETE or INSERT" in apply_statements(db, ["DROP TABLE notes"])[0]
    errors = apply_statements(db, ["INSERT INTO users (id, name) VALUES (3, 'cy')",
                                   "INSERT INTO notes (id, user_id, text) VALUES (2, 9, 'orphan')"])
    assert "FOREIGN KEY constraint failed" in errors[0] and "statement 2" in errors[0]
    assert _rows(db) == [(1, "ada"), (2, "bob")]
    assert apply_statements(db, ["INSERT INTO users (id, name) VALUES (3, 'cy')"]) == []
    assert _rows(db) == [(1, "ada"), (2, "bob"), (3, "cy")]


def test_a_task_blocked_by_data_goes_to_the_data_change_path(tmp_path):
    """The solutions phase takes a task the gate marked blocked by data (here task 6 of `awm bench repair`'s
    verifier_at_fault case, marked so by hand) and asks for INSERTs of the rows it presupposes, naming the row."""
    from awm_assets.synthesis.config import SynthesisConfig
    from awm_assets.synthesis.repair import _solutions_phase
    from awm_resources.llm import LLMClient
    from awm_rl.quality.gate import quality
    from benchmarks.repair import verifier_at_fault

    store, scenario = verifier_at_fault(tmp_path / "case")
    report = quality(store, [scenario])["scenarios"][0]
    task = next(t for t in report["tasks"] if t["task_idx"] == 6)
    task.update(verdict="blocked", blocked_by="data", eligible=False, solvable="no",
                reason="the task names project 'Orion', which no projects row holds")
    empty = tmp_path / "no-recordings"  # no answer: the phase ends, its first record says what it asked
    empty.mkdir()
    _solutions_phase(store, LLMClient(replay_dir=empty), scenario, report, SynthesisConfig(), 1, lambda _m: None, {6})
    zero = store.list_attempts(scenario, "solutions")[0]
    asked = zero["errors"]["task_6"][-1]
    assert asked.startswith("blocked by data: the task names project 'Orion', which no projects row holds")
    assert "INSERT statements that add exactly the rows the task presupposes" in asked
