"""Structural (blocking) and quality (warning) checks of each stage's stored artifact.

Plain functions over the store, so that the assets, the importer's readiness and tests share them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from awm_assets.synthesis.models import SNAKE
from awm_resources.documents import TASKS_FILE
from awm_resources.store import ArtifactStore


@dataclass
class CheckVerdict:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _table_rows(db_path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        return {n: conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        conn.close()


def structural_check(store: ArtifactStore, key: str, stage: str, meta: dict[str, Any]) -> CheckVerdict:
    """Is the stored artifact usable by the next stage at all?"""
    if stage == "tasks":
        tasks = store.read_json(key, "tasks.json")["tasks"]
        ok = len(tasks) > 0 and len(set(tasks)) == len(tasks) and all(t.strip() for t in tasks)
        return CheckVerdict(ok, f"{len(tasks)} distinct non-empty tasks" if ok else "tasks are empty or repeated",
                            {"tasks": len(tasks)})
    if stage == "db_schema":
        failed, total = meta.get("tables_failed", 0), meta.get("tables", 0)
        ok = total > 0 and failed < total
        return CheckVerdict(ok, f"{total - failed}/{total} tables execute", {"tables": total, "tables_failed": failed})
    if stage == "sample_data":
        rows = _table_rows(store.path(key, "initial.db"))
        filled = sum(1 for n in rows.values() if n > 0)
        ok = filled > 0 and filled >= len(rows) / 2
        return CheckVerdict(ok, f"{filled}/{len(rows)} tables have rows ({sum(rows.values())} rows)",
                            {"tables_with_rows": filled, "sample_rows": sum(rows.values())})
    if stage == "api_spec":
        spec = store.read_json(key, "api_spec.json")
        ops = [ep["operation_id"] for g in spec["api_groups"] for ep in g["endpoints"]]
        bad = [op for op in ops if not SNAKE.match(op)]
        ok = bool(ops) and len(set(ops)) == len(ops) and not bad
        return CheckVerdict(ok, f"{len(ops)} unique snake_case operations" if ok else f"duplicate or invalid operation ids {bad}",
                            {"endpoints": len(ops)})
    if stage == "env_code":
        tools, missing = meta.get("tools", 0), meta.get("missing_tools", [])
        ok = tools > 0 and not missing and not meta.get("degraded")
        return CheckVerdict(ok, f"imports, serves {tools} tools" + (f", missing {missing}" if missing else ""),
                            {"tools": tools})
    if stage == "verifiers":
        entries = store.verifiers(key).verifiers
        n_tasks = len(store.tasks(key).tasks) if store.has(key, TASKS_FILE) else 0
        covered = {e.task_idx for e in entries if e.functions}
        ok = bool(covered) and len(covered) >= n_tasks
        return CheckVerdict(ok, f"verifiers for {len(covered)}/{n_tasks} tasks", {"verifiers": len(covered)})
    raise KeyError(stage)


def quality_check(stage: str, meta: dict[str, Any], degraded: bool, attempts: int) -> CheckVerdict:
    """Warnings worth a look: degraded acceptance, tolerated failures, thin artifacts."""
    problems = []
    if degraded:
        problems.append("accepted degraded: no attempt met the threshold")
    if meta.get("tables_failed"):
        problems.append(f"{meta['tables_failed']} tables failed")
    if meta.get("inserts_failed"):
        problems.append(f"{meta['inserts_failed']} inserts failed")
    if meta.get("vacuous"):
        problems.append(f"{meta['vacuous']} verifiers pass on the unchanged database")
    if stage == "env_code" and meta.get("tools", 0) < 5:
        problems.append(f"only {meta.get('tools', 0)} tools")
    if stage == "env_code" and meta.get("accepts_database_url") is False:
        problems.append("reads DATABASE_PATH as a file path only: the published pipeline passes a sqlite:/// URL "
                        "(`awm export` consumers will fail to open the database)")
    return CheckVerdict(not problems, "; ".join(problems) or f"clean after {attempts} attempt(s)",
                        {"attempts": attempts})
