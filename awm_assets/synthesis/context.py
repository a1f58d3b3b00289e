"""What a prompt that asks for tool calls needs besides the schema: the tools as agents see them, and
the rows a task names (the head of each table often misses them, and the model then guesses ids).

Tool specs come from the env-check worker's tool listing (generated code runs only in sandboxed workers, never
in this process), cached per server code in `tools.json` so that retries and later stages reuse them.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

from awm_assets.synthesis.config import SynthesisConfig
from awm_resources.store import ArtifactStore

TOOLS_FILE = "tools.json"
QUOTED = re.compile(r"""["'\u201c\u2018]([^"'\u201d\u2019]{2,80})["'\u201d\u2019]""")
NAME = re.compile(r"\b[A-Z][\w&.-]*(?:\s+(?:of|the|and|for|de|&)?\s*[A-Z0-9][\w&.-]*)+")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
NUMBER = re.compile(r"(?<![\w.-])#?(\d+(?:\.\d+)?)\b")


def tool_specs(store: ArtifactStore, scenario: str, settings: SynthesisConfig | None = None) -> list[dict[str, Any]]:
    """The scenario's tools as agents see them (name, description, input_schema), plus `returns` where the
    API spec describes the response, from the stored server code; [] without one. The env_code stage stores
    them when it commits (`store_tool_specs`); otherwise the env-check worker lists them here."""
    from awm_rl.quality.envcheck import check_env_code

    server = store.path(scenario, "server.py")
    if not server.is_file():
        return []
    code = server.read_text(encoding="utf-8")
    if store.has(scenario, TOOLS_FILE):
        cached = store.read_json(scenario, TOOLS_FILE)
        if cached.get("server_digest") == _digest(code):
            return cached["tools"]
    check = check_env_code(code, store.path(scenario, "initial.db"),
                           timeout_s=(settings or SynthesisConfig()).env_check_timeout_s)
    return store_tool_specs(store, scenario, code, check.tool_specs)


def store_tool_specs(store: ArtifactStore, scenario: str, code: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cache the tools a check of `code` listed (with `returns` from the API spec) for `tool_specs`, so that the
    verifiers stage and repairs need no second sandboxed check of the same code."""
    from awm_resources.store import atomic_write_json

    returns = _spec_responses(store, scenario)
    tools = [{**s, **({"returns": returns[s["name"]]} if s["name"] in returns else {})} for s in specs]
    if tools:
        atomic_write_json(store.path(scenario, TOOLS_FILE), {"server_digest": _digest(code), "tools": tools})
    return tools


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _spec_responses(store: ArtifactStore, scenario: str) -> dict[str, Any]:
    """operation_id -> the response the API spec describes (what a tool returns), where a spec is stored."""
    if not store.has(scenario, "api_spec.json"):
        return {}
    spec = store.read_json(scenario, "api_spec.json")
    return {ep["operation_id"]: ep["response"] for g in spec.get("api_groups", []) for ep in g.get("endpoints", [])
            if isinstance(ep, dict) and ep.get("operation_id") and ep.get("response")}


def task_values(task: str) -> tuple[list[str], list[str]]:
    """The strings (quoted, names, emails, dates) and numbers a task mentions, in order, without repeats."""
    strings: list[str] = []
    for pattern in (QUOTED, EMAIL, DATE, NAME):
        for m in pattern.finditer(task):
            value = (m.group(1) if m.groups() else m.group(0)).strip(" .,")
            if len(value) >= 3 and value not in strings:
                strings.append(value)
    numbers = list(dict.fromkeys(m.group(1) for m in NUMBER.finditer(task) if not DATE.search(m.group(0))))
    return strings, numbers


def task_rows(db_path: Path, task: str, *, max_chars: int = 4000, per_value: int = 5) -> str:
    """Rows of the database that hold a value the task mentions (text columns by substring; `id` and
    REAL/NUMERIC columns by equality), as `## table: columns` blocks within `max_chars`; '' if none."""
    strings, numbers = task_values(task)
    if not strings and not numbers:
        return ""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        found = _matching_rows(conn, strings, numbers, per_value)
    finally:
        conn.close()
    blocks = []
    for table, (cols, rows) in found.items():
        lines = [f"## {table}: {', '.join(cols)}"]
        lines += [" | ".join("NULL" if v is None else str(v)[:80] for v in row) for row in rows]
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[... cut to the prompt budget ...]"


def _matching_rows(conn: sqlite3.Connection, strings: list[str], numbers: list[str], per_value: int
                   ) -> dict[str, tuple[list[str], list[tuple]]]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                         "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    found: dict[str, tuple[list[str], list[tuple]]] = {}
    for table in tables:
        info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        cols = [c[1] for c in info]
        text_cols = [c[1] for c in info if not c[2] or "CHAR" in c[2].upper() or "TEXT" in c[2].upper()]
        real_cols = [c[1] for c in info if any(k in (c[2] or "").upper() for k in ("REAL", "NUM", "DEC", "FLOAT", "DOUBLE"))]
        conditions: list[tuple[str, list[Any]]] = []
        for value in strings:
            if text_cols:
                conditions.append((" OR ".join(f'"{c}" LIKE ?' for c in text_cols), [f"%{value}%"] * len(text_cols)))
        for value in numbers:  # an integer may be an id; any number may be an amount
            num_cols = real_cols + (["id"] if "." not in value and "id" in cols else [])
            if num_cols:
                conditions.append((" OR ".join(f'"{c}" = ?' for c in num_cols), [float(value)] * len(num_cols)))
        rows: dict[Any, tuple] = {}
        for where, params in conditions:
            for row in conn.execute(f'SELECT rowid, * FROM "{table}" WHERE {where} LIMIT {per_value}', params):
                rows.setdefault(row[0], row[1:])
        if rows:
            found[table] = (cols, list(rows.values())[:per_value * 4])
    return found
