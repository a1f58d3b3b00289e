"""Env-check results kept for the quality gate (`awm_rl.quality.check_results`): found again only for exactly the
same check code, server code, initial database and solution; never a probe cut short or a malformed solution.
(That the gate then runs no worker and finds what a fresh run finds is tested on the real model's scenario in
tests/test_real_model_replay.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from awm_resources.store import ArtifactStore
from awm_rl.quality import check_results
from awm_rl.quality.check_results import CHECK_RESULTS_DIR, CheckResults

CODE = "app = None\n"
SOLUTION = {"calls": [{"tool": "add_note", "arguments": {"text": "x"}}], "final_answer": None}
PROBE = {"add_note": {"status": "ok", "calls": 2, "errors": [], "writes": ["notes"]}}


def _db(path: Path, rows: int) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.executemany("INSERT INTO notes VALUES (?)", [(f"n{i}",) for i in range(rows)])
    conn.close()
    return path


def _store(tmp_path: Path) -> tuple[ArtifactStore, Path]:
    store = ArtifactStore(tmp_path / "home")
    store.scenario_dir("notes").mkdir(parents=True)
    return store, _db(store.path("notes", "initial.db"), 2)


def _run(folder: Path) -> dict:
    folder.mkdir()
    return {"calls": [{"tool": "add_note", "arguments": {"text": "x"}, "status": 200, "error": None, "text": "{}"}],
            "initial_db": str(_db(folder / "start.db", 2)), "final_db": str(_db(folder / "final.db", 3)),
            "final_answer": None}


def test_found_again_for_the_same_inputs_only(tmp_path, monkeypatch):
    store, initial = _store(tmp_path)
    kept = CheckResults(store, "notes", CODE, initial)
    kept.keep_probe(PROBE)
    kept.keep_solution_runs({1: SOLUTION}, {"1": _run(tmp_path / "run")})

    # The same inputs, the solution written down another way (as the gate passes it: a model dump with defaults).
    again = CheckResults(store, "notes", CODE, initial)
    assert again.probe() == PROBE
    [(idx, run)] = again.solution_runs({1: {**SOLUTION, "at_fault": None, "diagnosis": None}}).items()
    assert idx == "1" and run["calls"][0]["status"] == 200
    assert Path(run["final_db"]).parent == store.scenario_dir("notes") / CHECK_RESULTS_DIR  # kept copies, not the temp files
    with sqlite3.connect(run["final_db"]) as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (3,)

    other_solution = {"calls": [{"tool": "add_note", "arguments": {"text": "y"}}]}
    assert again.solution_runs({1: other_solution}) == {}
    assert CheckResults(store, "notes", CODE + "# changed\n", initial).probe() is None
    _db(tmp_path / "other.db", 5)
    assert CheckResults(store, "notes", CODE, tmp_path / "other.db").probe() is None
    monkeypatch.setattr(check_results, "check_code_digest", lambda: "another version of the check")
    assert CheckResults(store, "notes", CODE, initial).probe() is None

    again.clear()
    assert not (store.scenario_dir("notes") / CHECK_RESULTS_DIR).exists()


def test_never_kept_what_depends_on_the_moment(tmp_path):
    store, initial = _store(tmp_path)
    kept = CheckResults(store, "notes", CODE, initial)
    kept.keep_probe({**PROBE, "slow": {"status": "not_probed", "calls": 0, "errors": [], "writes": [],
                                       "note": "probe budget of 60s spent before this tool"}})
    assert kept.probe() is None
    kept.keep_probe(None)  # the worker ended before the probe
    assert kept.probe() is None
    malformed = {"calls": "add_note"}
    kept.keep_solution_runs({1: malformed}, {"1": _run(tmp_path / "run1")})
    assert kept.solution_runs({1: malformed}) == {}
    run = _run(tmp_path / "run2")
    Path(run["final_db"]).unlink()  # a run whose final database is gone
    kept.keep_solution_runs({1: SOLUTION}, {"1": run})
    assert kept.solution_runs({1: SOLUTION}) == {}
    # An initial database that does not exist: nothing is found, nothing fails (the check itself reports it).
    assert CheckResults(store, "notes", CODE, tmp_path / "missing.db").probe() is None
