"""Warm verifier sandboxes (`awm_rl.isolation.verification.WARM`): kept between `run_verifiers` calls, yet each verdict
sees only its own two database copies and a fresh process, whatever the verdicts before it did.

The hostile verifier switches the worker's Python-level guard off first (as in test_verifier_attacks.py), so
what holds is the process model and the folder layout, not the audit hook.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from awm_rl.isolation.verification import PRISTINE_KEPT, WARM, VerifierJob, run_verifier, run_verifiers

from .test_verifier_attacks import HONEST, hostile

SECRET = "episode-one-secret-7f3a"


def _db(path: Path, names: list[str]) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO users (name) VALUES (?)", [(n,) for n in names])
    conn.commit()
    conn.close()
    return path


@pytest.fixture()
def episodes(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(initial, a first episode's final database holding SECRET, a second episode's final database)."""
    initial = _db(tmp_path / "initial.db", ["ada", "bob"])
    first = tmp_path / "first.db"
    shutil.copyfile(initial, first)
    with sqlite3.connect(first) as conn:
        conn.execute("INSERT INTO users (name) VALUES (?)", (SECRET,))
    conn.close()
    return initial, first, _db(tmp_path / "second.db", ["ada", "bob"])


def test_later_calls_reuse_the_warm_worker(episodes):
    initial, first, second = episodes
    assert run_verifier(HONEST, initial, first, timeout_s=7).verdict == "complete"  # limits of its own: a new one
    started = WARM.started
    verdicts = [run_verifier(HONEST, initial, final, timeout_s=7).verdict for final in (first, second, first)]
    assert verdicts == ["complete", "others", "complete"]
    assert WARM.started == started  # no new sandbox: the same warm worker answered each call


def test_a_verdict_sees_only_its_own_databases(episodes):
    """A verifier with the guard off lists and reads every file its sandbox can see, after a verdict on an episode
    holding a secret: it finds its own two copies only, and no other episode's data."""
    initial, first, second = episodes
    assert run_verifier(HONEST, initial, first, timeout_s=6).verdict == "complete"  # warms the sandbox on `first`
    snoop = hostile(f'''
folder = os.path.dirname(final_db_path)
seen = sorted(os.listdir(folder))
leaked = []
for name in seen:
    with open(os.path.join(folder, name), "rb") as fh:
        if b"{SECRET}" in fh.read():
            leaked.append(name)
return {{"seen": seen, "leaked": leaked, "mine": sorted([os.path.basename(initial_db_path),
                                                          os.path.basename(final_db_path)])}}
''')
    outcome = run_verifiers([VerifierJob(code=snoop, initial_db=initial, final_db=second, function="verify_task")],
                            timeout_s=6)[0]
    assert outcome.ok, outcome.error
    assert outcome.result["seen"] == outcome.result["mine"]
    assert outcome.result["leaked"] == []
    assert outcome.isolation == "bubblewrap"


def test_state_left_by_one_verdict_never_reaches_the_next(episodes):
    """One call patches every allowed module it can reach and the worker's globals; the next call's verifier, in
    the same warm worker, finds none of it (a fresh process and module namespace per verdict)."""
    initial, first, second = episodes
    taint = hostile('''
import json, re
json.loads = lambda *a, **k: {"result": "complete"}
re.carried = True
g["_STATE_FROM_BEFORE"] = True
b = g["__builtins__"]
(b if isinstance(b, dict) else vars(b))["carried"] = True
return {"tainted": True}
''')
    check = '''
import json, re
def verify_task(initial_db_path, final_db_path):
    import sqlite3
    return {"json_patched": json.loads("{}") != {}, "re_carried": hasattr(re, "carried"),
            "builtin_carried": "carried" in dir(__builtins__) if not isinstance(__builtins__, dict)
            else "carried" in __builtins__,
            "worker_global": "_STATE_FROM_BEFORE" in sqlite3.connect.__globals__}
'''
    first_out = run_verifiers([VerifierJob(code=taint, initial_db=initial, final_db=first, function="verify_task")],
                              timeout_s=6)[0]
    assert first_out.ok and first_out.result == {"tainted": True}
    started = WARM.started
    later = run_verifiers([VerifierJob(code=check, initial_db=initial, final_db=second, function="verify_task"),
                           VerifierJob(code=HONEST, initial_db=initial, final_db=second)], timeout_s=6)
    assert WARM.started == started  # the same warm worker
    assert later[0].ok, later[0].error
    assert later[0].result == {"json_patched": False, "re_carried": False, "builtin_carried": False,
                               "worker_global": False}
    assert later[1].verdict == "others"


def test_the_sandbox_folder_is_empty_between_verdicts(episodes):
    initial, first, second = episodes
    with WARM.sandbox(timeout_s=6) as box:
        for final in (first, second):
            box.run(VerifierJob(code=HONEST, initial_db=initial, final_db=final))
            assert list(box._scratch.iterdir()) == []  # the next verdict will see its own copies only
        # the pristine copies (these three databases among them) wait in a folder the sandbox never mounts
        sources = {key[0] for key in box._pristine}
        assert {str(p.resolve()) for p in (initial, first, second)} <= sources
        assert sorted(box._cache.iterdir()) == sorted(box._pristine.values())
        assert not box._cache.is_relative_to(box._scratch) and len(sources) <= PRISTINE_KEPT
