"""What the initial database holds, for grounding tool arguments: tables, columns, keys and values.

Read with plain sqlite3 from the trusted side (no generated code runs here). The tool probe uses
these facts to build arguments an agent could send: ids that exist, foreign keys that match, enum
values that occur, dates in the format the column stores. The rows kept of a table with a state
column (`status`, `state`, `is_archived`, ...) come one of each distinct state first: a tool that acts
only on "planned" sprints or "scheduled" transfers then meets such a row among the first it is given.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_ROWS = 50  # rows kept per table: enough to pick several consistent rows
MAX_STATES = 12  # a column with more distinct values is no state column
_STATE_NAME = re.compile(r"^(status|state|stage|phase)$|_(status|state|stage)$|^(is|has)_", re.IGNORECASE)

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")


def looks_like_date(value: Any) -> bool:
    return isinstance(value, str) and bool(_DATE_RE.match(value))


@dataclass(eq=False)
class Table:
    name: str
    columns: list[str]
    types: dict[str, str]
    primary_key: list[str]
    foreign_keys: dict[str, tuple[str, str]]  # column -> (table, column)
    unique: list[tuple[str, ...]]  # unique column sets (primary key excluded)
    rows: list[dict[str, Any]] = field(default_factory=list)  # user 1's rows first
    row_count: int = 0
    cascades: bool = False  # a foreign key with ON DELETE/UPDATE CASCADE or SET NULL/DEFAULT

    def values(self, column: str) -> list[Any]:
        """Distinct non-null values of `column` in row order (most frequent first on ties)."""
        counts = Counter(r[column] for r in self.rows if r.get(column) is not None)
        seen: dict[Any, None] = {}
        for r in self.rows:
            v = r.get(column)
            if v is not None and v not in seen:
                seen[v] = None
        return sorted(seen, key=lambda v: -counts[v]) if len(seen) <= 12 else list(seen)

    def max_int(self, column: str) -> int:
        ints = [v for v in (r.get(column) for r in self.rows) if isinstance(v, int)]
        return max(ints, default=0)


@dataclass
class DbFacts:
    tables: dict[str, Table]
    triggers: dict[str, list[str]]  # table -> tables its triggers write
    _strings: list[str] | None = field(default=None, repr=False, compare=False)

    def strings(self) -> list[str]:
        """Distinct stored strings, the first rows of each column (computed once)."""
        if self._strings is None:
            self._strings = list(dict.fromkeys(v for t in self.tables.values() for r in t.rows[:20]
                                               for v in r.values() if isinstance(v, str)))
        return self._strings

    def columns_named(self, name: str) -> list[tuple[Table, str]]:
        return [(t, c) for t in self.tables.values() for c in t.columns if c.lower() == name.lower()]

    def table_for(self, noun: str) -> Table | None:
        """The table named after `noun`, singular or plural (`playlist` -> `playlists`)."""
        noun = noun.lower()
        for cand in (noun, noun + "s", noun + "es", noun[:-1] + "ies" if noun.endswith("y") else None,
                     noun[:-1] if noun.endswith("s") else None):
            if cand and cand in self.tables:
                return self.tables[cand]
        return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def state_columns(conn: sqlite3.Connection, table: str, columns: list[str]) -> list[str]:
    """Columns that name a row's state: a state-like name and 2 to MAX_STATES distinct values."""
    out = []
    for c in columns:
        if _STATE_NAME.search(c):
            n = conn.execute(f"SELECT COUNT(DISTINCT {_quote(c)}) FROM {_quote(table)}").fetchone()[0]
            if 1 < n <= MAX_STATES:
                out.append(c)
    return out


def _row_order(conn: sqlite3.Connection, table: str, columns: list[str]) -> str:
    """ORDER BY terms: user 1's rows first, and within them one row of each distinct state before the rest."""
    user = "CASE WHEN user_id = 1 THEN 0 ELSE 1 END" if "user_id" in columns else ""
    states = state_columns(conn, table, columns)
    if not states:
        return f"{user}, " if user else ""
    partition = ", ".join(filter(None, [user, *(_quote(c) for c in states)]))
    spread = f"ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY rowid)"
    return f"{user}, {spread}, " if user else f"{spread}, "


def read_facts(db_path: Path) -> DbFacts:
    """Facts of the database at `db_path` (opened read-only)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        tables: dict[str, Table] = {}
        for name in names:
            info = conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
            columns = [r["name"] for r in info]
            pk = [r["name"] for r in sorted(info, key=lambda r: r["pk"]) if r["pk"]]
            fk_rows = conn.execute(f"PRAGMA foreign_key_list({_quote(name)})").fetchall()
            fks = {r["from"]: (r["table"], r["to"] or "id") for r in fk_rows}
            cascades = any(r[a].upper() != "NO ACTION" and r[a].upper() != "RESTRICT"
                           for r in fk_rows for a in ("on_delete", "on_update"))
            unique = []
            for idx in conn.execute(f"PRAGMA index_list({_quote(name)})"):
                if idx["unique"] and idx["origin"] != "pk":
                    cols = tuple(r["name"] for r in conn.execute(f"PRAGMA index_info({_quote(idx['name'])})"))
                    if cols and all(cols):
                        unique.append(cols)
            first = _row_order(conn, name, columns)
            try:
                rows = [dict(r) for r in conn.execute(
                    f"SELECT * FROM {_quote(name)} ORDER BY {first}rowid LIMIT {MAX_ROWS}")]
            except sqlite3.OperationalError:  # a WITHOUT ROWID table: its primary key orders it
                first = "CASE WHEN user_id = 1 THEN 0 ELSE 1 END, " if "user_id" in columns else ""
                order = first + ", ".join(_quote(c) for c in pk) if pk else (first.rstrip(", ") or "1")
                rows = [dict(r) for r in conn.execute(f"SELECT * FROM {_quote(name)} ORDER BY {order} LIMIT {MAX_ROWS}")]
            count = conn.execute(f"SELECT COUNT(*) FROM {_quote(name)}").fetchone()[0]
            tables[name] = Table(name, columns, {r["name"]: (r["type"] or "").upper() for r in info}, pk, fks,
                                 unique, rows, count, cascades)
        triggers: dict[str, list[str]] = {}
        for tbl, sql in conn.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type='trigger'"):
            written = re.findall(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+[\"`\[]?(\w+)", sql or "", re.I)
            triggers.setdefault(tbl, []).extend(w for w in written if w in tables)
        return DbFacts(tables, triggers)
    finally:
        conn.close()
