"""A task's literal values (the names, codes, ids, emails, dates and amounts it states) and where the initial
database holds them.

Each literal gets a role from the words around it: `reference` (a row the task presupposes: `order "BB-10482"`,
`listing ID 4812`, `my dog 'Luna'`, `the 'Medical' category`), `value` (what the task asks to write: `titled
'X'`, `with the message 'Y'`, `to 15000 USD`) or `unknown`. Only a `reference` with strong evidence (an id
marker, or an entity noun of the schema right beside it) is `strong`: the gate calls a task blocked by data only
on those. `RowIndex` finds the rows of the database that hold a value (equal, ignoring case, quote and dash
styles; money also as cents), read with plain sqlite3 on the trusted side.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_ROWS_PER_TABLE = 20_000

_QUOTED = re.compile(r"""(?<![\w])'([^'\n]{1,300}?)'(?![\w])|"([^"\n]{1,300}?)"|“([^”\n]{1,300}?)”|‘([^’\n]{1,300}?)’(?![\w])""")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_CODE = re.compile(r"\b(?=[A-Z0-9_-]*\d)(?=[A-Z0-9_-]*[A-Z])[A-Z][A-Z0-9]*(?:[-_][A-Z0-9]+)*\b")
_ID = re.compile(r"(?:\b(?:ID|[Ii]d|[Nn]umber|[Nn]o\.)\s*[:#]?\s*|#)(\d{1,12})\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
_NUMBER = re.compile(r"(?<![\w.:$-])\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w.:-]|\.\d)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

# Words right before a literal that make it content the task writes (a title, a message), unless they follow an
# entity named with "the"/"my" (`the offer named 'X'` is a reference).
VALUE_CUES = {"titled", "named", "called", "title", "name", "label", "labeled", "labelled", "message", "saying",
              "note", "notes", "body", "description", "reason", "caption", "comment", "text", "heading", "content",
              "tag", "tags", "to", "as", "says", "subject", "slogan", "memo"}
CREATE_ONLY = {"create", "add", "open", "post", "make", "generate", "register", "upload", "new", "issue", "record",
               "save", "store", "insert", "submit", "write"}
_PREPOSITIONS = ("with", "for", "from", "on", "to", "of", "at", "in")
_REF_PREPOSITIONS = ("for", "from", "on", "to", "of", "at", "in")  # `with options 'SVG'` is what a create sets
VERBS = {"search", "find", "list", "get", "fetch", "retrieve", "show", "locate", "view", "apply", "accept",
         "cancel", "assign", "reorder", "purchase", "buy", "gift", "like", "subscribe", "delete", "remove", "move",
         "transfer", "stake", "refund", "take", "protect", "reassign", "unassign", "ingest", "use", "using", "query",
         "calculate", "compare", "identify", "dispute", "pay", "request", "filter", "disable", "enable", "set",
         "update", "change", "rename", "edit", "modify", "configure", "mark", "send", "attach", "append", "put",
         "create", "add", "open", "post", "make", "generate", "register", "upload", "new", "issue", "record",
         "save", "store", "insert", "submit", "write", "book", "schedule", "block"}


@dataclass(frozen=True)
class Literal:
    text: str  # as the task states it
    kind: str  # text | code | email | id | date | number
    role: str  # reference | value | unknown
    strong: bool = False  # a reference with an id marker or an entity noun beside it
    noun: str | None = None  # the entity noun beside a reference (`order`, `dog`), when there is one
    mine: bool = False  # "my <noun> 'X'": the task presupposes the current user's row
    start: int = 0


_FOLD = str.maketrans("’‘“”–—", "''\"\"--")


def norm(value: Any) -> str:
    """Case, quote, dash and space styles folded, for comparing a task's text with stored text."""
    text = unicodedata.normalize("NFKC", str(value)).lower()
    text = text.translate(_FOLD)
    return " ".join(text.split())


def singular(word: str) -> str:
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def _words_before(task: str, start: int, n: int = 5) -> list[str]:
    return [w.lower() for w in _WORD.findall(task[max(0, start - 80):start])][-n:]


def _word_after(task: str, end: int) -> str | None:
    m = _WORD.match(task[end:].lstrip(" "))
    return m.group(0).lower() if m else None


def _role(task: str, start: int, end: int, entity_nouns: set[str], kind: str) -> tuple[str, bool, str | None, bool]:
    """(role, strong, noun, mine) of the literal at task[start:end] (see the module docstring)."""
    before = _words_before(task, start)
    raw_before = task[max(0, start - 12):start].lower()
    last = before[-1] if before else ""
    after = _word_after(task, end)
    if kind == "id" or re.search(r"(?:\bid|#)\s*[:#]?\s*$", raw_before):
        noun = next((singular(w) for w in reversed(before[:-1]) if singular(w) in entity_nouns), None)
        return "reference", True, noun, _mine(before, noun)
    verbs = [w for w in _WORD.findall(task[:start].lower()) if w in VERBS]
    creating = bool(verbs) and verbs[-1] in CREATE_ONLY  # the verb that governs the literal makes something
    if last in VALUE_CUES:
        # `the offer named 'X'`, `my existing playlist named 'X'`: a reference; `a pet named 'X'`: a value
        det = next((w for w in reversed(before[:-1]) if w in ("the", "my", "a", "an", "new", "existing")), None)
        noun = next((singular(w) for w in reversed(before[:-1]) if w not in ("the", "my", "existing")), None)
        if last in ("named", "called", "titled") and (det in ("the", "existing") or det == "my" and not creating):
            return "reference", True, noun, det == "my"
        return "value", False, None, False
    if after and singular(after) in entity_nouns and last in ("the", "my", "existing", "in", "from", "of"):
        return "reference", True, singular(after), last == "my"  # `in the 'Medical' category`
    if len(before) > 1 and before[-2] in ("the", "my", "existing") and last not in VALUE_CUES:
        return "reference", True, singular(last), before[-2] == "my"  # `the dog 'Luna'`, `my campaign 'X'`
    if singular(last) in entity_nouns or (len(before) > 1 and last in _PREPOSITIONS
                                          and singular(before[-2]) in entity_nouns):
        noun = singular(last) if singular(last) in entity_nouns else singular(before[-2])
        if creating and singular(last) in entity_nouns and (len(before) < 2 or before[-2] not in _REF_PREPOSITIONS):
            return "value", False, None, False  # `create a coupon code 'SPRING20'`, `variation 'License'`
        return "reference", True, noun, _mine(before, noun)
    if last in ("for", "on", "from", "of") or "existing" in before:
        return "reference", False, None, False
    return "unknown", False, None, False


def _mine(before: list[str], noun: str | None) -> bool:
    if noun is None:
        return False
    for i, w in enumerate(before):
        if singular(w) == noun:
            return "my" in before[max(0, i - 3):i]
    return False


def task_literals(task: str, entity_nouns: set[str]) -> list[Literal]:
    """Every literal the task states, in order, each with its role (`entity_nouns`: the schema's table names and
    their words, singular)."""
    out: list[Literal] = []
    taken: list[tuple[int, int]] = []

    def add(text: str, kind: str, start: int, end: int) -> None:
        if not text.strip() or any(s <= start < e or s < end <= e for s, e in taken):
            return
        taken.append((start, end))
        role, strong, noun, mine = _role(task, start, end, entity_nouns, kind)
        strong = strong and kind not in ("number", "date")  # `the last 90 days`: no row presupposed
        out.append(Literal(text.strip(), kind, role, strong, noun, mine, start))

    for m in _QUOTED.finditer(task):
        text = next(g for g in m.groups() if g is not None)
        if task[m.end():m.end() + 1] == ":":  # a JSON key, not a value
            taken.append((m.start(), m.end()))
            continue
        kind = "email" if _EMAIL.fullmatch(text) else "code" if _CODE.fullmatch(text) else \
            "date" if _DATE.fullmatch(text) else "text"
        add(text, kind, m.start(), m.end())
    for m in _EMAIL.finditer(task):
        add(m.group(0), "email", m.start(), m.end())
    for m in _ID.finditer(task):
        add(m.group(1), "id", m.start(1), m.end(1))
    for m in _DATE.finditer(task):
        add(m.group(0), "date", m.start(), m.end())
    for m in _CODE.finditer(task):
        add(m.group(0), "code", m.start(), m.end())
    for m in _NUMBER.finditer(task):
        add(m.group(0).lstrip("$"), "number", m.start(), m.end())
    return sorted(out, key=lambda lit: lit.start)


def entity_nouns(tables: list[str]) -> set[str]:
    """The singular words a task uses for the schema's entities: each table name and each of its words
    (`pet_vaccinations` -> pet_vaccination, pet, vaccination)."""
    out: set[str] = set()
    for t in tables:
        parts = [singular(p) for p in t.lower().split("_") if len(p) > 2]
        out.add(singular(t))
        out.update(p for p in parts if p not in ("user", "item", "log", "info", "data", "setting", "type"))
    return out


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


@dataclass
class RowIndex:
    """Every row of the initial database, and where each stored value occurs."""

    columns: dict[str, list[str]]
    rows: dict[str, dict[int, dict[str, Any]]]  # table -> rowid -> row
    _text: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)  # norm text -> (table, rowid, col)
    _nums: dict[float, list[tuple[str, int, str]]] = field(default_factory=dict)

    @classmethod
    def read(cls, db_path: Path) -> RowIndex:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT "
                                                "LIKE 'sqlite_%' ORDER BY name")]
            columns: dict[str, list[str]] = {}
            rows: dict[str, dict[int, dict[str, Any]]] = {}
            for name in names:
                quoted = '"' + name.replace('"', '""') + '"'
                try:
                    cur = conn.execute(f"SELECT rowid AS __rowid, * FROM {quoted} LIMIT {MAX_ROWS_PER_TABLE}")
                    data = [dict(r) for r in cur]
                    columns[name] = [d[0] for d in cur.description[1:]]
                    rows[name] = {r.pop("__rowid"): r for r in data}
                except sqlite3.OperationalError:  # WITHOUT ROWID: number the rows
                    cur = conn.execute(f"SELECT * FROM {quoted} LIMIT {MAX_ROWS_PER_TABLE}")
                    columns[name] = [d[0] for d in cur.description]
                    rows[name] = {i + 1: dict(r) for i, r in enumerate(cur)}
        finally:
            conn.close()
        index = cls(columns, rows)
        for table, table_rows in rows.items():
            for rowid, row in table_rows.items():
                for col, v in row.items():
                    if isinstance(v, str):
                        index._text.setdefault(norm(v), []).append((table, rowid, col))
                        num = _number(v) if re.fullmatch(r"-?[\d,]+(?:\.\d+)?", v.strip()) else None
                        if num is not None:
                            index._nums.setdefault(num, []).append((table, rowid, col))
                    elif isinstance(v, (int, float)) and not isinstance(v, bool):
                        index._nums.setdefault(float(v), []).append((table, rowid, col))
        return index

    def find(self, lit: Literal, *, contains: bool = False) -> list[tuple[str, int, str]]:
        """(table, rowid, column) of every stored value equal to the literal; `contains`: stored text that
        contains it too (a search term, a name within a longer title)."""
        if lit.kind in ("id", "number"):
            num = _number(lit.text)
            if num is None:
                return []
            hits = list(self._nums.get(num, []))
            if lit.kind == "number":  # money stored as cents
                hits += [h for h in self._nums.get(round(num * 100, 2), []) if "cent" in h[2].lower()]
            return hits
        key = norm(lit.text)
        hits = list(self._text.get(key, []))
        if lit.kind == "date":
            hits += [h for k, v in self._text.items() if k.startswith(key) and k != key for h in v]
        elif contains and len(key) >= 4:
            hits += [h for k, v in self._text.items() if key in k and k != key for h in v]
        if not hits and ", " in key:  # `Austin, TX` stored as city and region in one row
            parts = [p.strip() for p in key.split(",")]
            per_part = [{(t, r) for t, r, _ in self._text.get(p, [])} for p in parts]
            both = set.intersection(*per_part) if all(per_part) else set()
            hits = [(t, r, "+".join(parts)) for t, r in sorted(both)]
        return hits

    def row(self, table: str, rowid: int) -> dict[str, Any]:
        return self.rows.get(table, {}).get(rowid, {})
