"""Tool arguments grounded in the initial database, and the edge inputs an agent will also send.

A parameter is matched to a column by what the tool says about it: a `table.column` in its
description, its name equal to a column of a table the tool is about, `<noun>_id` to the key of the
`<noun>` table (foreign keys followed to the rows they reference), a name ending in a column's name
(`friend_username` -> `username`). Parameters matched to columns of one table take their values from
the same row, so `(playlist_id, track_id)` come from one `playlist_tracks` row. Enums use their
values, dates keep the format their column stores, and what matches nothing falls back to the
schema's example, default, or a plain value of its type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Any

from awm_rl.quality.dbfacts import DbFacts, Table, looks_like_date
from awm_rl.runtime.tools import ToolRoute

VALID_VARIANTS = 3  # grounded argument sets per tool, each from other rows


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
    noun_table = _noun_table(lname, facts)
    if noun_table is not None:  # repo -> repositories.name, owner -> users.username
        col = next((c for c in _IDENTIFYING if c in noun_table.columns), None)
        if col is not None and prop.get("type") in (None, "string"):
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
    today = date.today().isoformat()
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


def _linked_rows(primary: Table | None, sources: dict[str, _Source], i: int) -> dict[str, dict[str, Any]]:
    """Row i of the primary table and the rows its foreign keys point at (or that point at it)."""
    if primary is None or not primary.rows:
        return {}
    row = primary.rows[i % len(primary.rows)]
    linked = {primary.name: row}
    for table in {s.table.name: s.table for s in sources.values()}.values():
        if table.name in linked:
            continue
        for col, (ref_table, ref_col) in primary.foreign_keys.items():
            if ref_table == table.name:
                match = next((r for r in table.rows if r.get(ref_col) == row.get(col)), None)
                if match is not None:
                    linked[table.name] = match
                    break
        else:
            for col, (ref_table, ref_col) in table.foreign_keys.items():
                if ref_table == primary.name:
                    match = next((r for r in table.rows if r.get(col) == row.get(ref_col)), None)
                    if match is not None:
                        linked[table.name] = match
                        break
    return linked


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
                return coerced
    if source is not None and linked and linked.get(source.table.name, {}).get(source.column) is not None:
        coerced = _coerce(linked[source.table.name][source.column], schema)
        if coerced is not None:
            return coerced
    if source is not None:
        values = source.table.values(source.column)
        if values:
            coerced = _coerce(values[i % len(values)], schema)
            if coerced is not None:
                return coerced
    return _plain_value(name.lower(), schema, facts, i)


def _distinct_shared_values(args: dict[str, Any], sources: dict[str, _Source], props: dict[str, Any],
                            defs: dict[str, Any], i: int) -> None:
    """Id parameters grounded in the same key (`sprint_id`, `move_to_sprint_id`) take different rows' values:
    one id twice is rarely valid (a sprint moved into itself, a transfer to the same account)."""
    used: dict[tuple[str, str], list[Any]] = {}
    for name, value in args.items():
        src = sources.get(name)
        if src is None or not src.key_like:
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


def grounded_sets(tool: ToolRoute, facts: DbFacts) -> list[ArgSet]:
    """Valid argument sets: required parameters only, then every parameter, from several rows."""
    schema = tool.input_schema
    props: dict[str, Any] = schema.get("properties") or {}
    required = [p for p in schema.get("required", []) if p in props]
    defs = schema.get("$defs") or {}
    tables = _tool_tables(tool, facts)
    sources = {n: s for n in props if (s := find_source(n, _schema_of(props[n], defs), tool, facts, tables))}
    anchor = _anchor_table(sources, tables)
    primary = None if anchor is not None else _primary_table(sources)
    out: list[ArgSet] = []
    seen: set[str] = set()

    def add(kind: str, names: list[str], i: int) -> None:
        linked = _linked_rows(primary, sources, i)
        args = {n: _value_for(n, props[n], sources.get(n), anchor, facts, i, defs, linked=linked) for n in names}
        _distinct_shared_values(args, sources, props, defs, i)
        key = repr(sorted(args.items(), key=lambda kv: kv[0]))
        if key not in seen:
            seen.add(key)
            owners = {sources[n].table.name if n in sources and sources[n].column == n else None for n in args}
            # every argument is a column of one row of a table the tool is about: a filter that must match it
            grounded = bool(args) and len(owners) == 1 and None not in owners and \
                next(iter(owners)) in {t.name for t in tables}
            out.append(ArgSet(kind, args, grounded))

    add("valid:required", required, 0)
    for i in range(VALID_VARIANTS):
        add(f"valid:all#{i}", list(props), i)
    if tool.method == "POST" and anchor is not None and anchor.unique:
        # The same row again, its unique values changed: a create that must succeed (the plain
        # variants, taken from an existing row, are the duplicate that must answer 4xx).
        uniq = {c for cols in anchor.unique for c in cols}
        for a in [a for a in out if uniq & set(a.args)][:1]:
            fresh = {k: (f"{v} (probe copy)" if k in uniq and isinstance(v, str) else v) for k, v in a.args.items()}
            out.append(ArgSet("valid:fresh", fresh))
            a.kind = "edge:duplicate"
    return out


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
