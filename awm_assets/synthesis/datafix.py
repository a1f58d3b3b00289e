"""A data change for a task whose target the seed data already holds, or whose presupposed rows it lacks
(`awm repair`, solutions phase).

In AWM-1K a verifier often passes, or can never pass, because the initial database already holds what
the task asks for; other tasks name rows (a pet, a booking) no table holds. The solution writer may then
propose UPDATE/DELETE statements that remove or alter the rows that hold the target, or INSERT statements
that add the rows a task presupposes. A proposal is kept only if, on a copy of the database with it applied (on top of the
proposals already kept in the same attempt): every statement runs (foreign keys on), no verifier that
passed the do-nothing check before fails it now, the task's own solution is proven, and every other
task proven before stays proven. Kept changes are applied to `initial.db` at commit (the original kept
as `initial.original.db`), logged in `data_changes.json` and appended to `sample.json`/`sample.sql`
where those exist, so that a rebuild gives the same database.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from awm_resources.clock import file_clock, fix_sqlite, fixed_clock_sql
from awm_resources.sqlite_build import SampleTable, sample_sql
from awm_resources.store import atomic_path

WRITE = re.compile(r"^\s*(UPDATE|DELETE|INSERT)\b", re.I)
TARGET = re.compile(r"^\s*(?:UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.I)
CHANGES_FILE = "data_changes.json"
ORIGINAL_DB = "initial.original.db"


def apply_statements(db: Path, statements: list[str]) -> list[str]:
    """Run UPDATE/DELETE/INSERT statements on `db` in one transaction, foreign keys on; the errors (nothing is
    written when there is one)."""
    bad = [f"statement {i + 1} is not an UPDATE, DELETE or INSERT: {s[:200]!r}" for i, s in enumerate(statements)
           if not WRITE.match(s)]
    if bad or not statements:
        return bad or ["no statements"]
    conn = sqlite3.connect(db, isolation_level=None)
    now = file_clock(db)  # the environment's fixed clock, for 'now' in the statements
    fix_sqlite(conn, now)
    statements = [fixed_clock_sql(s) for s in statements] if now else statements
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN")
        for i, statement in enumerate(statements):
            try:
                conn.execute(statement)
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                return [f"statement {i + 1} failed ({exc}): {statement[:200]!r}"]
        conn.execute("COMMIT")
        return []
    finally:
        conn.close()


def check_data_change(ctx: Any, base: Path, work: Path, idx: int, statements: list[str],
                      task: tuple[str, dict[str, Any]], guarded: dict[int, tuple[str, dict[str, Any]]],
                      verifiers: list[dict[str, Any]]) -> list[str]:
    """Apply `statements` to a copy of `base` at `work` and check it (module docstring); the errors, [] when
    the change is kept (`work` then holds the changed database). `task` and each of `guarded` (other tasks
    proven before) are (verifier code, solution); `verifiers` are every verifier entry of the scenario."""
    from awm_assets.synthesis.stages import do_nothing_check, prove_solutions

    shutil.copyfile(base, work)
    errors = apply_statements(work, statements)
    if errors:
        return errors
    timeout = ctx.settings.verifier_timeout_s
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    do_nothing_check(verifiers, base, before, timeout)
    do_nothing_check(verifiers, work, after, timeout)
    # A change this task wants and another task forbids is refused with both named.
    errors += [f"task {idx} wants this change and {item.replace('_', ' ')} forbids it: after the data change the "
               f"verifier of {item} fails the do-nothing check: {lines[0][:300]}"
               for item, lines in sorted(after.items()) if item not in before]
    failures, _, error = prove_solutions(ctx, {idx: task, **guarded}, initial=work)
    if error:
        return errors + [f"the solutions could not run on the changed database: {error}"]
    if failures.get(idx) is not None:
        errors.append(f"on the changed database this task's solution still does not pass: {failures[idx][:1500]}")
    errors += [f"task {idx} wants this change and task {i} forbids it: the data change breaks task {i}, proven "
               f"before: {failures[i][:600]}" for i in sorted(guarded) if failures.get(i) is not None]
    return errors


def commit_data_changes(store: Any, scenario: str, changes: list[dict[str, Any]]) -> None:
    """Apply kept changes (task order) to the stored initial.db and record them (module docstring)."""
    if not changes:
        return
    initial = store.path(scenario, "initial.db")
    if not store.has(scenario, ORIGINAL_DB):
        shutil.copyfile(initial, store.path(scenario, ORIGINAL_DB))
    with atomic_path(initial) as tmp:
        shutil.copyfile(initial, tmp)
        for change in changes:
            errors = apply_statements(Path(tmp), change["statements"])
            if errors:
                raise RuntimeError(f"data change for task {change['task_idx']} no longer applies: {errors[0]}")
    log = store.read_json(scenario, CHANGES_FILE) if store.has(scenario, CHANGES_FILE) else {"changes": []}
    store.write_json(scenario, CHANGES_FILE, {"changes": log["changes"] + changes})
    if store.has(scenario, "sample.json"):
        samples = [SampleTable.model_validate(t) for t in store.read_json(scenario, "sample.json")["tables"]]
        for change in changes:
            for statement in change["statements"]:
                m = TARGET.match(statement)
                samples.append(SampleTable(table_name=m.group(1) if m else "?", insert_statements=[statement],
                                           reasoning=f"data change for task {change['task_idx']}: {change['diagnosis']}"))
        store.write_json(scenario, "sample.json", {"tables": [s.model_dump() for s in samples]})
        store.write_text(scenario, "sample.sql", sample_sql(samples))
