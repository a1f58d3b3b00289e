"""Tool arguments grounded in the initial database, and the edge inputs an agent will also send.

A parameter is matched to a column by what the tool says about it: a `table.column` in its
description, its name equal to a column of a table the tool is about, `<noun>_id` to the key of the
`<noun>` table (foreign keys followed to the rows they reference), a name ending in a column's name
(`friend_username` -> `username`). Parameters matched to columns of one table take their values from
the same row, so `(playlist_id, track_id)` come from one `playlist_tracks` row. Enums use their
values, dates keep the format their column stores, a `pattern` gets a stored value (or a common one)
that matches it, and what matches nothing falls back to the schema's example, default, or a plain
value of its type.

When none of those sets is accepted, `retry_sets` offers more, until one is: further rows (a table's
rows come one of each state first, see `dbfacts`), parameters linked through other tables or taken
each from its own table, and for creates fresh values for the names and unique columns an existing
row already holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from awm_resources.clock import today as clock_today
from awm_rl.quality.dbfacts import DbFacts, Table, looks_like_date
from awm_rl.runtime.tools import ToolRoute

VALID_VARIANTS = 3  # grounded argument sets per tool, each from other rows
RETRY_ROUNDS = 4  # rounds of `retry_sets`: up to three sets each, and for a create their fresh-name copies


@dataclass
class ArgSet:
    """One probe call's arguments; `kind` is `valid:<how>` or `edge:<what>`."""

    kind: str
    args: dict[str, Any]
    row_grounded: bool = False  # every value is a column of one row of a table the tool is about

    @property
    def valid(self) -> bool:
        return self.kind.startswith("valid")


@dataclass
class _Source:
    table: Table
    column: str
    key_like: bool  # an id: a primary key or a column referencing one


_TABLE_COLUMN = re.compile(r"\b([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\b", re.I)


def _nouns(tool: ToolRoute) -> list[str]:
    words = re.split(r"[^a-z0-9]+", tool.name.lower())
    words += [seg for seg in re.split(r"[/_\-]+", re.sub(r"\{[^}]*\}", "", tool.path.lower())) if seg]
    return [w for w in dict.fromkeys(words) if len(w) > 2 and w != "api"]


def _tool_tables(tool: ToolRoute, facts: DbFacts) -> list[Table]:
    """Tables the tool is about, by the nouns of its name and path (most specific first)."""
    found: dict[str, Table] = {}
    nouns = _nouns(tool)
    for n in nouns:
        t = facts.table_for(n)
        if t is not None:
            found.setdefault(t.name, t)
    for t in facts.tables.values():  # compound names: shop_offers for "offer", playlist_tracks for "playlist track"
        parts = t.name.lower().split("_")
        if len(parts) > 1 and any(p.rstrip("s") in {n.rstrip("s") for n in nouns} for p in parts):
            found.setdefault(t.name, t)
    return list(found.values())


def _follow(facts: DbFacts, table: Table, column: str) -> _Source:
    """A foreign-key column leads to the rows it references (their ids surely exist)."""
    ref = table.foreign_keys.get(column)
    if ref and ref[0] in facts.tables and ref[1] in facts.tables[ref[0]].columns:
        return _Source(facts.tables[ref[0]], ref[1], True)
    return _Source(table, column, column in table.primary_key or column.endswith("_id"))


def find_source(name: str, prop: dict[str, Any], tool: ToolRoute, facts: DbFacts,
                tool_tables: list[Table]) -> _Source | None:
    """The column whose values suit parameter `name`, or None."""
    lname = name.lower()
    for tname, col in _TABLE_COLUMN.findall(str(prop.get("description") or "")):
        t = facts.tables.get(tname)
        if t is not None and col in t.columns:
            return _follow(facts, t, col)
    for t in tool_tables:
        if lname in (c.lower() for c in t.columns):
            col = next(c for c in t.columns if c.lower() == lname)
            return _follow(facts, t, col) if col in t.foreign_keys else _Source(t, col, col in t.primary_key)
    if lname == "id" or lname.endswith("_id"):
        noun = lname[:-3] if lname.endswith("_id") else ""
        if not noun:  # /things/{id}: the path segment before the parameter names the table
            m = re.search(r"/([a-z0-9_\-]+)/\{" + re.escape(name) + r"\}", tool.path, re.I)
            noun = m.group(1).replace("-", "_") if m else ""
        t = facts.table_for(noun) if noun else None
        if t is None and noun:
            t = next((x for x in facts.tables.values() if x.name.lower().endswith("_" + noun + "s")
                      or x.name.lower().endswith("_" + noun)), None)
        if t is not None and t.primary_key:
            return _Source(t, t.primary_key[0], True)
    for t in tool_tables:  # reason_code -> bookings.cancellation_reason_code
        col = next((c for c in t.columns if c.lower().endswith("_" + lname)), None)
        if col is not None:
            return _follow(facts, t, col)
    matches = facts.columns_named(lname)
    if matches:
        t, col = max(matches, key=lambda m: (m[1] in m[0].foreign_keys, m[0].row_count))
        return _follow(facts, t, col)
    listed = prop.get("type") == "array" and (prop.get("items") or {}).get("type") in (None, "string")
    noun = lname[:-1] if listed and lname.endswith("s") else lname  # labels -> labels.name, assignees -> users
    noun_table = _noun_table(noun, facts)
    if noun_table is not None:  # repo -> repositories.name, owner -> users.username
        col = next((c for c in _IDENTIFYING if c in noun_table.columns), None)
        if col is not None and (prop.get("type") in (None, "string") or listed):
            return _Source(noun_table, col, False)
    words = lname.split("_")
    for k in range(1, len(words)):  # friend_username -> username, item_name -> items.name
        suffix, prefix = "_".join(words[k:]), "_".join(words[:k])
        owner = facts.table_for(prefix)
        if owner is not None and suffix in owner.columns:
            return _Source(owner, suffix, suffix in owner.primary_key)
        matches = [m for m in facts.columns_named(suffix) if m[0] in tool_tables] or facts.columns_named(suffix)
        if matches and len(suffix) > 3:
            t, col = max(matches, key=lambda m: m[0].row_count)
            return _follow(facts, t, col)
    last = words[-1]  # reservation_time -> time_slots.slot_time, referenced by the tool's reservations
    for t in tool_tables:
        for ref_table, _ in t.foreign_keys.values():
            ref = facts.tables.get(ref_table)
            col = next((c for c in ref.columns if c.lower().endswith("_" + last)), None) if ref else None
            if ref is not None and col is not None and len(last) > 3:
                return _Source(ref, col, False)
    return None


_IDENTIFYING = ("username", "login", "handle", "slug", "name", "title", "code", "key", "email")
_PERSON = ("owner", "author", "assignee", "reporter", "creator", "member", "recipient", "sender", "user",
           "friend", "buyer", "seller", "customer")


def _noun_table(noun: str, facts: DbFacts) -> Table | None:
    """The table a bare noun parameter names: `repo` -> repositories, `owner` -> users."""
    table = facts.table_for(noun)
    if table is None and len(noun) >= 3:
        table = next((t for t in facts.tables.values() if t.name.lower().startswith(noun)), None)
    if table is None and noun.split("_")[-1] in _PERSON:
        table = facts.table_for("user")
    return table


def _schema_of(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Resolve `$ref` and pick the non-null branch of `anyOf` (Optional[...] fields)."""
    for _ in range(5):
        if "$ref" in prop:
            prop = {**defs.get(prop["$ref"].rsplit("/", 1)[-1], {}), **{k: v for k, v in prop.items() if k != "$ref"}}
        elif "anyOf" in prop or "oneOf" in prop:
            branches = [b for b in prop.get("anyOf", prop.get("oneOf", [])) if b.get("type") != "null"]
            if not branches:
                break
            merged = {k: v for k, v in prop.items() if k not in ("anyOf", "oneOf")}
            prop = {**branches[0], **merged}
        else:
            break
    return prop


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    try:
        if kind == "integer" and not isinstance(value, bool):
            return int(value)
        if kind == "number" and not isinstance(value, bool):
            return float(value) if not isinstance(value, int) else value
        if kind == "boolean":
            return bool(int(value)) if isinstance(value, (int, str)) and str(value).isdigit() else bool(value)
        if kind == "string" and not isinstance(value, str):
            return str(value)
    except (TypeError, ValueError):
        return None
    return value


def _plain_value(name: str, schema: dict[str, Any], facts: DbFacts, i: int) -> Any:
    """A value from the schema alone: example, default, enum, a date, or a plain value of its type."""
    if "example" in schema:
        return schema["example"]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][i % len(schema["examples"])]
    if schema.get("default") is not None:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][i % len(schema["enum"])]
    kind, fmt = schema.get("type"), schema.get("format", "")
    if kind == "string":
        if fmt == "date-time" or re.search(r"(_at|datetime|timestamp)$", name):
            return _date_like(facts, with_time=True)
        if fmt == "date" or re.search(r"(date|day)$", name):
            return _date_like(facts, with_time=False)
        return ["Probe value", "Alpha", "Beta"][i % 3]
    if kind == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1 if "exclusiveMinimum" in schema else 1)
        return int(max(lo, min(1 + i, schema.get("maximum", 10**9))))
    if kind == "number":
        return float(schema.get("minimum", 1.0)) + i
    if kind == "boolean":
        return i % 2 == 0
    if kind == "array":
        return [_plain_value(name.rstrip("s"), schema.get("items") or {"type": "string"}, facts, i)]
    if kind == "object":
        return {}
    return "Probe value"


def _date_like(facts: DbFacts, *, with_time: bool) -> str:
    """A date in the format the database already stores dates in (ISO when it stores none)."""
    for t in facts.tables.values():
        for c in t.columns:
            for v in t.values(c)[:3]:
                if looks_like_date(v) and ((" " in v or "T" in v) == with_time):
                    return v
    today = clock_today().isoformat()  # in the env worker: the environment's fixed clock (awm_resources.clock)
    return f"{today}T10:00:00" if with_time else today


def _anchor_table(sources: dict[str, _Source], tool_tables: list[Table]) -> Table | None:
    """The table whose rows should supply several parameters at once (most parameters covered)."""
    best, best_cover = None, 1
    candidates = list(tool_tables) + [s.table for s in sources.values()]
    names = set(sources)
    for t in dict.fromkeys(candidates):
        cover = len(names & set(t.columns))
        if cover > best_cover:
            best, best_cover = t, cover
    return best


def _primary_table(sources: dict[str, _Source]) -> Table | None:
    """Among the tables parameters come from, the one with most foreign keys into the others."""
    used = list(dict.fromkeys(s.table for s in sources.values()))
    if len(used) < 2:
        return None
    names = {t.name for t in used}
    return max(used, key=lambda t: sum(1 for ref in t.foreign_keys.values() if ref[0] in names))


def _related(param: str, via: str) -> bool:
    """Does a foreign-key column (`owner_id`) name what a parameter (`owner`, `repo`) is?"""
    a, b = (x.lower().removesuffix("_id") for x in (param, via))
    return a == b or (min(len(a), len(b)) >= 3 and (a.startswith(b) or b.startswith(a))) \
        or a.endswith("_" + b) or b.endswith("_" + a)


def _reachable(facts: DbFacts, primary: Table, row: dict[str, Any],
               wanted: set[str]) -> list[tuple[Table, dict[str, Any], str, int]]:
    """(table, row, foreign-key column, hops) of the rows `row` references, up to three hops
    (a repository's owner through the issue's repository), then the rows of `wanted` tables that point at it."""
    out: list[tuple[Table, dict[str, Any], str, int]] = []
    frontier = [(primary, row)]
    for depth in range(1, 4):
        nxt = []
        for table, r in frontier:
            for col, (ref_table, ref_col) in table.foreign_keys.items():
                target = facts.tables.get(ref_table)
                if target is None or r.get(col) is None:
                    continue
                match = next((x for x in target.rows if x.get(ref_col) == r.get(col)), None)
                if match is not None and all(match is not o[1] or col != o[2] for o in out):
                    out.append((target, match, col, depth))
                    nxt.append((target, match))
        frontier = nxt
    for name in wanted:
        table = facts.tables[name]
        for col, (ref_table, ref_col) in table.foreign_keys.items():
            if ref_table == primary.name:
                match = next((x for x in table.rows if x.get(col) == row.get(ref_col)), None)
                if match is not None:
                    out.append((table, match, col, 4))
    return out


def _linked_rows(facts: DbFacts, primary: Table | None, sources: dict[str, _Source],
                 i: int) -> dict[str, dict[str, Any]]:
    """Parameter -> the row its value comes from: row i of the primary table and the rows linked to it.
    A parameter takes the row reached through a foreign key named like it (`owner` -> `owner_id`), else,
    when no other parameter takes the same column (`owner` and `username` both users.username), the
    nearest linked row."""
    if primary is None or not primary.rows:
        return {}
    row = primary.rows[i % len(primary.rows)]
    reached = _reachable(facts, primary, row, {s.table.name for s in sources.values()} - {primary.name})
    out: dict[str, dict[str, Any]] = {}
    for name, src in sources.items():
        if src.table is primary:
            out[name] = row
            continue
        cands = [c for c in reached if c[0] is src.table]
        named = [c for c in cands if _related(name, c[2])]
        shared = sum(1 for s in sources.values() if s.table is src.table and s.column == src.column) > 1
        if named or (cands and not shared):
            out[name] = min(named or cands, key=lambda c: c[3])[1]
    return out


_PATTERN_GUESSES = ("10:00", "10:00:00", "2024-01-15", "2024-01-15T10:00:00", "ABC", "abc", "A1", "123",
                    "+15555550123", "#336699", "336699", "USD", "en", "user@example.com", "https://example.com")


def _matching(pattern: str, facts: DbFacts, i: int) -> str | None:
    """A stored string that matches `pattern` (a schema's regex), else a common value that does."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return None
    found = [v for v in facts.strings() if rx.search(v)] or [v for v in _PATTERN_GUESSES if rx.search(v)]
    return found[i % len(found)] if found else None


def _fits(value: Any, schema: dict[str, Any], facts: DbFacts, i: int) -> Any:
    """`value`, or a value that matches the schema's `pattern` where `value` does not."""
    pattern = schema.get("pattern")
    if isinstance(value, str) and isinstance(pattern, str):
        try:
            if re.search(pattern, value):
                return value
        except re.error:
            return value
        return _matching(pattern, facts, i) or value
    return value


def _value_for(name: str, schema: dict[str, Any], source: _Source | None, anchor: Table | None,
               facts: DbFacts, i: int, defs: dict[str, Any], depth: int = 0,
               linked: dict[str, dict[str, Any]] | None = None) -> Any:
    schema = _schema_of(schema, defs)
    if schema.get("enum"):
        return schema["enum"][i % len(schema["enum"])]
    if schema.get("type") == "array":
        item = _schema_of(schema.get("items") or {}, defs)
        if source is not None and item.get("type") != "object":
            vals = [_coerce(v, item) for v in source.table.values(source.column)[i:i + 2]]
            vals = [v for v in vals if v is not None]
            if vals:
                return vals
        return [_value_for(name.rstrip("s"), item, source, anchor, facts, i, defs, depth + 1)]
    if schema.get("type") == "object" or "properties" in schema:
        if depth > 3:
            return {}
        return {k: _value_for(k, v, None, anchor, facts, i, defs, depth + 1)
                for k, v in (schema.get("properties") or {}).items()}
    if anchor is not None and name in anchor.columns and anchor.rows:
        value = anchor.rows[i % len(anchor.rows)].get(name)
        if value is not None:
            coerced = _coerce(value, schema)
            if coerced is not None:
                return _fits(coerced, schema, facts, i)
    if source is not None and linked and linked.get(name, {}).get(source.column) is not None:
        coerced = _coerce(linked[name][source.column], schema)
        if coerced is not None:
            return _fits(coerced, schema, facts, i)
    if source is not None:
        values = source.table.values(source.column)
        if values:
            coerced = _coerce(values[i % len(values)], schema)
            if coerced is not None:
                return _fits(coerced, schema, facts, i)
    return _fits(_plain_value(name.lower(), schema, facts, i), schema, facts, i)


def _distinct_shared_values(args: dict[str, Any], sources: dict[str, _Source], props: dict[str, Any],
                            defs: dict[str, Any], i: int) -> None:
    """Id parameters grounded in the same key or unique column (`sprint_id`, `move_to_sprint_id`) take
    different rows' values: one id twice is rarely valid (a sprint moved into itself, an issue marked a
    duplicate of itself)."""
    used: dict[tuple[str, str], list[Any]] = {}
    for name, value in args.items():
        src = sources.get(name)
        if src is None or not (src.key_like or any(src.column in cols for cols in src.table.unique)):
            continue
        taken = used.setdefault((src.table.name, src.column), [])
        if value in taken:
            schema = _schema_of(props[name], defs)
            values = src.table.values(src.column)
            for k in range(len(values)):
                other = _coerce(values[(i + 1 + k) % len(values)], schema)
                if other is not None and other not in taken:
                    args[name] = value = other
                    break
        taken.append(value)


@dataclass
class _Plan:
    """Where each parameter of one tool takes its values from."""

    tool: ToolRoute
    props: dict[str, Any]
    required: list[str]
    defs: dict[str, Any]
    tables: list[Table]
    sources: dict[str, _Source]
    anchor: Table | None
    primary: Table | None


def _plan(tool: ToolRoute, facts: DbFacts) -> _Plan:
    schema = tool.input_schema
    props: dict[str, Any] = schema.get("properties") or {}
    defs = schema.get("$defs") or {}
    tables = _tool_tables(tool, facts)
    sources = {n: s for n in props if (s := find_source(n, _schema_of(props[n], defs), tool, facts, tables))}
    anchor = _anchor_table(sources, tables)
    return _Plan(tool, props, [p for p in schema.get("required", []) if p in props], defs, tables, sources,
                 anchor, None if anchor is not None else _primary_table(sources))


def _args(plan: _Plan, facts: DbFacts, names: list[str], i: int, anchor: Table | None,
          primary: Table | None) -> dict[str, Any]:
    """Values for `names` from row i (of `anchor`, or of `primary` and the rows linked to it)."""
    linked = _linked_rows(facts, primary or anchor, plan.sources, i)
    args = {n: _value_for(n, plan.props[n], plan.sources.get(n), anchor, facts, i, plan.defs, linked=linked)
            for n in names}
    _distinct_shared_values(args, plan.sources, plan.props, plan.defs, i)
    return args


def args_key(args: dict[str, Any]) -> str:
    """The identity of an argument set (to try each one once)."""
    return repr(sorted(args.items(), key=lambda kv: kv[0]))


def grounded_sets(tool: ToolRoute, facts: DbFacts) -> list[ArgSet]:
    """Valid argument sets: required parameters only, then every parameter, from several rows."""
    plan = _plan(tool, facts)
    sources, tables, anchor = plan.sources, plan.tables, plan.anchor
    out: list[ArgSet] = []
    seen: set[str] = set()

    def add(kind: str, names: list[str], i: int) -> None:
        args = _args(plan, facts, names, i, anchor, plan.primary)
        key = args_key(args)
        if key not in seen:
            seen.add(key)
            owners = {sources[n].table.name if n in sources and sources[n].column == n else None for n in args}
            # every argument is a column of one row of a table the tool is about: a filter that must match it
            grounded = bool(args) and len(owners) == 1 and None not in owners and \
                next(iter(owners)) in {t.name for t in tables}
            out.append(ArgSet(kind, args, grounded))

    add("valid:required", plan.required, 0)
    for i in range(VALID_VARIANTS):
        add(f"valid:all#{i}", list(plan.props), i)
    if tool.method == "POST" and anchor is not None and anchor.unique:
        # The same row again, its unique values changed: a create that must succeed (the plain
        # variants, taken from an existing row, are the duplicate that must answer 4xx).
        uniq = {c for cols in anchor.unique for c in cols}
        for a in [a for a in out if uniq & set(a.args)][:1]:
            fresh = {k: (f"{v} (probe copy)" if k in uniq and isinstance(v, str) else v) for k, v in a.args.items()}
            out.append(ArgSet("valid:fresh", fresh))
            a.kind = "edge:duplicate"
    return out


_NAMING = ("name", "title", "slug", "code", "key", "username", "email", "handle", "label", "sku", "tag")


def _fresh_names(plan: _Plan) -> set[str]:
    """Parameters of a create or rename whose stored values may already be taken: unique columns and names."""
    about = {t.name for t in plan.tables}
    out = set()
    for n, prop in plan.props.items():
        src = plan.sources.get(n)
        if _schema_of(prop, plan.defs).get("type") not in (None, "string") or (src is not None and src.key_like):
            continue
        unique = src is not None and any(src.column in cols for cols in src.table.unique)
        if (src is None or src.table.name in about) and (unique or n.lower().split("_")[-1] in _NAMING):
            out.add(n)
    return out


def _fresh(value: Any, schema: dict[str, Any], n: int) -> Any:
    """A value like `value` that no row holds yet (an e-mail stays an e-mail, a slug a slug)."""
    if not isinstance(value, str) or not value:
        return value
    if "@" in value:
        local, _, domain = value.partition("@")
        new = f"{local}+probe{n}@{domain}"
    elif re.fullmatch(r"[A-Z0-9_\-]+", value):
        new = value + "QZ"[n % 2] * (1 + n // 2)
    elif re.fullmatch(r"[\w.\-]+", value):
        new = f"{value}-copy{n + 1}"
    else:
        new = f"{value} (probe copy {n + 1})"
    limit = schema.get("maxLength")
    if isinstance(limit, int) and len(new) > limit:
        new = (value[:max(limit - 2, 0)] + f"q{n}")[:limit]
    pattern = schema.get("pattern")
    try:
        return new if not isinstance(pattern, str) or re.search(pattern, new) else value
    except re.error:
        return new


def retry_sets(tool: ToolRoute, facts: DbFacts) -> Iterator[ArgSet]:
    """More valid sets for a tool that accepted none of `grounded_sets`, most promising first, each round:
    for a create or a rename, the sets below with fresh names; rows past the first ones (states not met
    yet); the parameters linked through another table; each parameter from its own table. The caller
    stops at the first one accepted and skips sets it already sent (`args_key`)."""
    plan = _plan(tool, facts)
    fresh = _fresh_names(plan) if tool.method in ("POST", "PUT", "PATCH") else set()  # creates, renames
    used = list(dict.fromkeys(s.table for s in plan.sources.values()))
    others = [t for t in used if t is not plan.anchor and t is not plan.primary]
    used_names = {t.name for t in used}
    second = max(others, key=lambda t: sum(1 for ref in t.foreign_keys.values() if ref[0] in used_names),
                 default=None)  # the next table to link the others from (a repository, not its collaborators)
    for j in range(RETRY_ROUNDS):
        params = list(plan.props) if j % 2 == 0 else plan.required
        sets = [(f"valid:row#{VALID_VARIANTS + j}", _args(plan, facts, params, VALID_VARIANTS + j,
                                                          plan.anchor, plan.primary))]
        if second is not None:
            sets.append((f"valid:linked#{j}", _args(plan, facts, params, j, None, second)))
        sets.append((f"valid:unlinked#{j}", _args(plan, facts, params, j, None, None)))
        if fresh:
            sets = [(f"{kind}+fresh", {k: _fresh(v, _schema_of(plan.props[k], plan.defs), j) if k in fresh else v
                                       for k, v in args.items()}) for kind, args in sets] + sets
        for kind, args in sets:
            yield ArgSet(kind, args)


def created_ids(tool: ToolRoute, facts: DbFacts) -> dict[str, tuple[str, str]]:
    """Parameter -> (table, key column) for the ids this tool takes: a create that writes that table
    in the same probe can supply one where no stored row qualifies."""
    plan = _plan(tool, facts)
    return {n: (s.table.name, s.column) for n, s in plan.sources.items()
            if s.key_like and s.column in s.table.primary_key}


def edge_sets(tool: ToolRoute, facts: DbFacts, base: dict[str, Any]) -> list[ArgSet]:
    """Inputs an agent sends by mistake: ids that do not exist, boundary numbers, a wrong type."""
    schema = tool.input_schema
    props: dict[str, Any] = schema.get("properties") or {}
    defs = schema.get("$defs") or {}
    tables = _tool_tables(tool, facts)
    out: list[ArgSet] = []
    missing_ids = {}
    for name, prop in props.items():
        prop = _schema_of(prop, defs)
        src = find_source(name, prop, tool, facts, tables)
        if src is not None and src.key_like and prop.get("type") in ("integer", "string"):
            top = src.table.max_int(src.column)
            missing_ids[name] = top + 100_000 if prop.get("type") == "integer" else f"missing-{top + 100_000}"
    if missing_ids:
        out.append(ArgSet("edge:nonexistent_id", {**base, **missing_ids}))
    for name, prop in props.items():
        prop = _schema_of(prop, defs)
        if prop.get("type") in ("integer", "number") and name not in missing_ids:
            for bound in ("minimum", "maximum"):
                if bound in prop:
                    out.append(ArgSet(f"edge:{bound}:{name}", {**base, name: prop[bound]}))
            if "minimum" not in prop and "exclusiveMinimum" not in prop:
                out.append(ArgSet(f"edge:zero:{name}", {**base, name: 0}))
            break  # one numeric parameter is enough to see how the handler takes its bounds
    for name, prop in props.items():
        kind = _schema_of(prop, defs).get("type")
        if kind in ("integer", "number", "boolean"):
            out.append(ArgSet(f"edge:wrong_type:{name}", {**base, name: "not-a-" + kind}))
            break
    return out
