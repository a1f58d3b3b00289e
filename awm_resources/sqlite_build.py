"""Build a SQLite database from AWM schema tables and sample inserts, recording every failing statement.

Shared by the importer and the synthesis stages (schema and sample-data checks), so that an imported
environment and a synthesized one are judged by the same rules: DDL then indexes per table, in order;
INSERTs with foreign keys on; single failures tolerated and reported.
"""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, Field

from awm_resources.clock import fix_sqlite, fixed_clock_sql, stamp

STATEMENT_TIME_LIMIT_S = 5.0


class SchemaTable(BaseModel):
    name: str
    ddl: str
    indexes: list[str] = Field(default_factory=list)


class SampleTable(BaseModel):
    table_name: str
    reasoning: str | None = None
    insert_statements: list[str] = Field(default_factory=list)


class StatementFailure(BaseModel):
    kind: str  # "ddl" | "index" | "insert"
    table: str
    index: int  # position of the statement within its table's list
    statement: str
    error: str


class BuildResult(BaseModel):
    tables_total: int = 0
    tables_failed: int = 0
    indexes_failed: int = 0
    inserts_total: int = 0
    inserts_failed: int = 0
    failures: list[StatementFailure] = Field(default_factory=list)
    tables_created: list[str] = Field(default_factory=list)
    rows: int = 0

    @property
    def table_error_rate(self) -> float:
        return self.tables_failed / self.tables_total if self.tables_total else 1.0

    @property
    def insert_error_rate(self) -> float:
        return self.inserts_failed / self.inserts_total if self.inserts_total else 1.0


class _Guarded:
    """A connection whose statements are aborted after STATEMENT_TIME_LIMIT_S (runaway recursive CTEs)."""

    def __init__(self, path: Path | str):
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        # A fresh file that nobody reads until it is built: no journal file and no sync per statement
        # (thousands of INSERTs would each wait for the disk); `build_database` syncs the file once.
        self.conn.execute("PRAGMA journal_mode=MEMORY")
        self.conn.execute("PRAGMA synchronous=OFF")
        self.deadline = 0.0
        self.conn.set_progress_handler(lambda: 1 if time.monotonic() > self.deadline else 0, 10_000)

    def execute(self, sql: str) -> None:
        self.deadline = time.monotonic() + STATEMENT_TIME_LIMIT_S
        try:
            self.conn.execute(sql)
        except sqlite3.ProgrammingError as exc:  # several statements in one string: run them as a script
            if "one statement" not in str(exc):
                raise
            self.conn.executescript(sql)


def _short(sql: str, limit: int = 300) -> str:
    sql = " ".join(sql.split())
    return sql if len(sql) <= limit else sql[:limit] + " ..."


def apply_schema(conn: _Guarded, tables: Iterable[SchemaTable], result: BuildResult) -> None:
    for table in tables:
        result.tables_total += 1
        try:
            conn.execute(table.ddl)
            result.tables_created.append(table.name)
        except sqlite3.Error as exc:
            result.tables_failed += 1
            result.failures.append(StatementFailure(kind="ddl", table=table.name, index=0,
                                                    statement=_short(table.ddl), error=str(exc)))
            continue
        for i, index_sql in enumerate(table.indexes):
            try:
                conn.execute(index_sql)
            except sqlite3.Error as exc:
                result.indexes_failed += 1
                result.failures.append(StatementFailure(kind="index", table=table.name, index=i,
                                                        statement=_short(index_sql), error=str(exc)))


def apply_inserts(conn: _Guarded, tables: Iterable[SampleTable], result: BuildResult) -> None:
    conn.execute("PRAGMA foreign_keys=ON")
    for table in tables:
        for i, sql in enumerate(table.insert_statements):
            result.inserts_total += 1
            try:
                conn.execute("SAVEPOINT stmt")
                conn.execute(sql)
                conn.execute("RELEASE stmt")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK TO stmt")
                conn.execute("RELEASE stmt")
                result.inserts_failed += 1
                result.failures.append(StatementFailure(kind="insert", table=table.table_name, index=i,
                                                        statement=_short(sql), error=str(exc)))


def count_rows(conn: sqlite3.Connection) -> int:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    return sum(conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names)


def build_database(path: Path, tables: list[SchemaTable], samples: list[SampleTable] | None, *,
                   now: datetime | None = None) -> BuildResult:
    """Create `path` (must not exist) from the schema, then the inserts if given. With `now`, SQLite's date
    functions read it for 'now' and the database carries it (`awm_resources.clock`)."""
    result = BuildResult()
    guarded = _Guarded(path)
    try:
        if now is not None:
            fix_sqlite(guarded.conn, now)
            stamp(guarded.conn, now)
            tables = [t.model_copy(update={"ddl": fixed_clock_sql(t.ddl),
                                           "indexes": [fixed_clock_sql(i) for i in t.indexes]}) for t in tables]
            samples = None if samples is None else [
                s.model_copy(update={"insert_statements": [fixed_clock_sql(x) for x in s.insert_statements]})
                for s in samples]
        apply_schema(guarded, tables, result)
        if samples is not None:
            apply_inserts(guarded, samples, result)
        result.rows = count_rows(guarded.conn)
    finally:
        guarded.conn.close()
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
    return result


def schema_sql(tables: list[SchemaTable]) -> str:
    """Human-readable, executable form of the schema (what `schema.sql` holds)."""
    parts = []
    for t in tables:
        parts.append(f"-- table: {t.name}\n{t.ddl.strip().rstrip(';')};")
        parts.extend(f"{ix.strip().rstrip(';')};" for ix in t.indexes)
    return "\n\n".join(parts) + "\n"


def sample_sql(samples: list[SampleTable]) -> str:
    """Human-readable, executable form of the sample data (what `sample.sql` holds)."""
    parts = ["PRAGMA foreign_keys=ON;"]
    for t in samples:
        parts.append(f"-- table: {t.table_name}")
        parts.extend(f"{s.strip().rstrip(';')};" for s in t.insert_statements)
    return "\n".join(parts) + "\n"


def table_heads(path: Path, rows_per_table: int) -> list[tuple[str, list[str], list[tuple], int]]:
    """(table, columns, first rows, row count) of every table, read-only: what previews and prompts show."""
    conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        heads = []
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            cur = conn.execute(f"SELECT * FROM {quoted} LIMIT {int(rows_per_table)}")
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            heads.append((name, cols, rows, conn.execute(f"SELECT COUNT(*) FROM {quoted}").fetchone()[0]))
        return heads
    finally:
        conn.close()


def database_excerpt(path: Path, *, max_chars: int = 12_000, rows_per_table: int = 12) -> str:
    """The database's content for a prompt, within a character budget: per table its columns, row count
    and first rows (user 1's data first, as the sample data puts it), tables cut evenly when over budget."""
    heads = table_heads(path, rows_per_table)
    per_table = max(400, max_chars // max(len(heads), 1))
    blocks = []
    for name, cols, rows, total in heads:
        lines = [f"## {name} ({total} rows): {', '.join(cols)}"]
        shown, long_values = 0, False
        for row in rows:
            line = " | ".join("NULL" if v is None else str(v)[:80] for v in row)
            if sum(len(x) + 1 for x in lines) + len(line) > per_table:
                break
            lines.append(line)
            shown += 1
            long_values = long_values or any(len(str(v)) > 80 for v in row)
        if shown < total:  # say what was cut and how to get the rest (issue 38: totals and ids were guessed)
            lines.append(f"... ({shown} of {total} rows shown; the others are in the database: read them with the "
                         f"tools)")
        if long_values:
            lines.append("(values longer than 80 characters are cut here)")
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[... cut to the prompt budget ...]"
