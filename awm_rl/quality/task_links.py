"""Each task linked to the tools and rows it needs, and what follows: blocked by a broken tool, blocked by a
missing row, goal already met, literals the tool listing gives away.

- Tools a task needs: the tools its reference solution calls where one exists; else the tools the task names,
  read from its text against each tool's name and description: every word of the tool's name in the task
  (verbs compared by kind: `add` is a create), or, among the tools of one kind (create, update, read, ...), the
  one whose name and description share the most distinctive words with the task, if half its name is there.
- A needed tool is broken when the probe found it `shadowed` (unreachable), `client_error_only` (no valid input
  accepted) or `server_error` on every valid input it tried, where not all of those were conflicts with an
  existing unique row (a create that answers 5xx on a duplicate works for new values).
- Rows a task presupposes: its strong references (`literals.py`: an id, or an entity noun beside the value), and
  names a task gives after `for`/`on` that look like a name. Missing means no stored value equals (or, for
  text, contains) it; for `my <noun> 'X'`, only rows of other users hold it.
- Goal already met: every value the task asks to write (its text, codes and emails) is already stored in the
  tables its tools write, at least two of them in one row (or one long value beside another literal of the
  task). The rows are named. A reference solution whose only change duplicates an existing row is no proof.
Everything here reads the initial database with plain sqlite3; no generated code runs.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

from awm_rl.quality.dbfacts import looks_like_date
from awm_rl.quality.literals import _QUOTED, Literal, RowIndex, entity_nouns, norm, singular, task_literals

MAX_ROWS_SHOWN = 3
MAX_LEAKS_SHOWN = 10  # literals found in the tool listing, per task

VERB_KINDS = {
    "create": {"create", "add", "new", "open", "post", "make", "generate", "register", "submit", "issue", "upload",
               "insert", "book", "request", "record", "save", "store", "log", "attach", "append", "ingest", "send",
               "write", "schedule", "gift", "purchase", "buy", "donate", "pledge"},
    "update": {"update", "change", "set", "edit", "modify", "configure", "enable", "disable", "mark", "rename",
               "increase", "decrease", "adjust", "toggle", "turn", "apply", "assign", "move", "reassign",
               "unassign", "accept", "approve", "reject", "protect", "patch", "put"},
    "delete": {"delete", "remove", "cancel", "revoke", "archive", "unsubscribe", "unstake", "withdraw"},
    "read": {"get", "list", "fetch", "search", "find", "retrieve", "show", "query", "locate", "view", "lookup",
             "filter", "browse", "return", "check", "calculate", "compute", "compare", "preview", "summary",
             "summarize", "history", "read", "project", "simulate"},
}
_KIND_OF = {w: kind for kind, words in VERB_KINDS.items() for w in words}
_STOP = {"my", "the", "a", "an", "of", "for", "to", "by", "and", "with", "in", "on", "from", "id", "ids", "all",
         "current", "me", "api", "v1", "v2", "at", "as", "or", "into", "per", "is", "be", "it", "that", "this",
         "their", "its", "your", "any", "each", "one", "via", "using", "use"}
_TOKEN = re.compile(r"[a-z][a-z0-9]*")
_USER_COLUMNS = ("user_id", "owner_id", "owner_user_id")
BROKEN_STATUSES = ("shadowed", "client_error_only", "server_error")


def words(text: str) -> list[str]:
    """Lower-case word stems of a name or a sentence (`list_my_active_lobbies` -> list, my, active, lobby)."""
    return [singular(w) for w in _TOKEN.findall(text.lower().replace("_", " ").replace("-", " "))]


def _content(ws: list[str]) -> set[str]:
    """Words that say what a tool does: verbs as their kind, no stop words."""
    return {_KIND_OF.get(w, w) for w in ws if w not in _STOP}


_CLAUSE = re.compile(r"(?:^|[.,;:!?(]|\b(?:and|then|to|also|please|or|first|finally|next)\b)\s*$", re.I)


def task_content(task: str) -> set[str]:
    """A task's words as `_content` has them, quoted text left out (a title or a note names no tool), and a verb
    counted as one only where a clause starts with it: `list the open issues` has no create in it, `..., then
    open a pull request` has."""
    text = _QUOTED.sub(" ", task)
    out: set[str] = set()
    for m in _TOKEN.finditer(text.lower()):
        w = singular(m.group(0))
        if w in _STOP:
            continue
        kind = _KIND_OF.get(w)
        if kind is None:
            out.add(w)
        elif _CLAUSE.search(text[:m.start()]):
            out.add(kind)
        else:
            out.add(w)  # `open issues`, `the campaign update`: a noun or an adjective here
    return out


def tool_kind(name: str) -> str:
    first = next((w for w in words(name) if w in _KIND_OF), None)
    return _KIND_OF[first] if first else "other"


def tools_from_text(task: str, tools: dict[str, dict[str, Any]]) -> list[str]:
    """The tools a task names (see the module docstring); `tools`: name -> {"description": ...}."""
    task_words = task_content(task)
    sigs = {n: (_content(words(n)), _content(words(n)) | _content(words(t.get("description") or "")))
            for n, t in tools.items()}
    df: dict[str, int] = {}
    for _, sig in sigs.values():
        for w in sig:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log(1 + len(tools) / c) for w, c in df.items()}
    covered = {n for n, (name_w, _) in sigs.items() if name_w and name_w <= task_words}
    # `post a campaign update` covers create_campaign and create_campaign_update: the larger one is meant
    needed = {n for n in covered if not any(sigs[n][0] < sigs[m][0] for m in covered)}
    kind_words: dict[str, dict[str, int]] = {}
    for n, (name_w, _) in sigs.items():
        for w in name_w:
            kind_words.setdefault(tool_kind(n), {})[w] = kind_words.get(tool_kind(n), {}).get(w, 0) + 1
    explained = {w for n in needed for w in sigs[n][0]}
    best: dict[str, tuple[float, str]] = {}
    for n, (name_w, sig) in sigs.items():
        kind = tool_kind(n)
        matched = name_w & task_words
        # half its name in the task, one of those words no other tool of its
        # kind has and no needed tool explains (`recurring`), two of its words beside the verb
        if (not name_w or len(matched) * 2 < len(name_w) or kind not in task_words
                or not any(kind_words[kind][w] == 1 for w in matched - set(VERB_KINDS) - explained)
                or len((sig & task_words) - set(VERB_KINDS)) < 2):
            continue
        score = sum(idf[w] * (2 if w in name_w else 1) for w in sig & task_words)
        if score > best.get(kind, (0.0, ""))[0]:
            best[kind] = (score, n)
    needed |= {n for _, n in best.values()}
    return sorted(needed)


def broken_reason(name: str, tool: dict[str, Any]) -> str | None:
    """Why the probe's finding makes `tool` unusable for a task, or None when it is usable."""
    status = tool.get("status")
    if status == "shadowed":
        return f"tool {name} is unreachable: its route is shadowed by {tool.get('shadowed_by') or 'an earlier route'}"
    if status == "client_error_only":
        return f"tool {name} accepted no valid input the probe sent (all answers 4xx)"
    if status == "server_error" and not tool.get("accepted"):
        errors = tool.get("errors") or []
        if errors and all("UNIQUE constraint failed" in str(e.get("error")) for e in errors):
            return None  # fails on duplicates only
        first = next((e for e in errors if str(e.get("input", "")).startswith("valid")), errors[0] if errors else {})
        why = str(first.get("error") or "").splitlines()[0][:160] if first else ""
        return f"tool {name} answered HTTP {first.get('status_code', '5xx')} on every valid input: {why}"
    return None


def _user_column(index: RowIndex, table: str) -> str | None:
    return next((c for c in _USER_COLUMNS if c in index.columns.get(table, [])), None)


def missing_rows(lits: list[Literal], index: RowIndex) -> list[dict[str, Any]]:
    """The rows a task presupposes that the initial data lacks (or holds only for other users)."""
    out = []
    for lit in lits:
        if lit.role != "reference" or lit.kind in ("number", "date"):
            continue
        namelike = lit.kind in ("code", "email", "id") or (
            lit.kind == "text" and len(lit.text.split()) <= 5 and all(w[:1].isupper() or not w[:1].isalpha()
                                                                      for w in lit.text.split()))
        if not (lit.strong or namelike):
            continue
        hits = index.find(lit, contains=lit.kind in ("text", "code"))
        if lit.kind == "id":
            hits = [h for h in hits if h[2] == "id" or h[2].endswith("_id") or h[2] in _pk_like(index, h[0])]
        if not hits:
            what = f"{lit.noun} " if lit.noun else ""
            out.append({"literal": lit.text, "noun": lit.noun,
                        "reason": f"no row holds {what}{lit.text!r} (the task presupposes it exists)"})
            continue
        if lit.mine:
            owned = [(t, r) for t, r, _ in hits if _user_column(index, t) is not None]
            if owned and not any(index.row(t, r).get(_user_column(index, t) or "") == 1 for t, r in owned):
                tables = sorted({t for t, _ in owned})
                out.append({"literal": lit.text, "noun": lit.noun,
                            "reason": f"{lit.text!r} is in {', '.join(tables)} only for other users, not the "
                                      f"current user (id 1)"})
    return out


def _pk_like(index: RowIndex, table: str) -> list[str]:
    return [c for c in index.columns.get(table, []) if c.endswith("id")]


def _tables_written(needed: list[str], tools: dict[str, dict[str, Any]], index: RowIndex) -> set[str]:
    """Tables the task's write tools write: what the probe saw them write, and tables their names name."""
    out: set[str] = set()
    for name in needed:
        if tool_kind(name) == "read":
            continue
        out.update(tools.get(name, {}).get("writes") or [])
        name_w = set(words(name))
        for table in index.columns:
            tw = [singular(p) for p in table.lower().split("_")]
            if singular(table) in name_w or (tw and tw[-1] in name_w):
                out.add(table)
    return out


def goal_met_rows(task: str, lits: list[Literal], needed: list[str], tools: dict[str, dict[str, Any]],
                  index: RowIndex) -> list[dict[str, Any]] | None:
    """The rows that already hold what the task asks to write, or None (see the module docstring)."""
    kinds = {_KIND_OF.get(w) for w in words(task)}
    if not kinds & {"create", "update"}:
        return None
    values = [lit for lit in lits if lit.role != "reference" and lit.kind in ("text", "code", "email")
              and len(norm(lit.text)) >= 4]
    if not values:
        return None
    tables = _tables_written(needed, tools, index) or set(index.columns)
    found: dict[tuple[str, int], set[Literal]] = {}
    for lit in values:
        hits = [(t, r) for t, r, _ in index.find(lit) if t in tables]
        if not hits:
            return None  # something the task asks for is not there yet
        for key in hits:
            found.setdefault(key, set()).add(lit)
    others = [lit for lit in lits if lit not in values]
    rows = []
    for (table, rowid), held in sorted(found.items(), key=lambda kv: -len(kv[1])):
        row = index.row(table, rowid)
        extra = [lit for lit in others if any((t, r) == (table, rowid) for t, r, _ in index.find(lit))]
        if len(held) >= 2 or (len(values) == 1 and len(norm(next(iter(held)).text)) >= 6 and extra):
            shown = {c: v[:200] if isinstance(v, str) else v for c, v in row.items() if v is not None and any(
                norm(v) == norm(lit.text) or (lit.kind in ("id", "number") and str(v) == lit.text)
                for lit in [*held, *extra])}
            rows.append({"table": table, "rowid": rowid, "matches": shown})
    if not rows:
        return None
    return rows[:MAX_ROWS_SHOWN]


def duplicate_only(run: dict[str, Any]) -> dict[str, Any] | None:
    """The existing row a reference solution's run only duplicated (its one added row equals it but for keys and
    timestamps, and it changed nothing else), or None."""
    try:
        initial, final = Path(run["initial_db"]), Path(run["final_db"])
        a, b = RowIndex.read(initial), RowIndex.read(final)
    except (KeyError, OSError, sqlite3.Error):
        return None
    added: list[tuple[str, dict[str, Any]]] = []
    for table, rows in b.rows.items():
        before = a.rows.get(table, {})
        if any(k in before and before[k] != v for k, v in rows.items()) or any(k not in rows for k in before):
            return None  # a real change
        added += [(table, v) for k, v in rows.items() if k not in before]
    if not added:
        return None
    dup = None
    for table, row in added:
        keep = [c for c, v in row.items() if not (c == "id" or c.endswith("_at") or looks_like_date(v))]
        same = next((old for old in a.rows.get(table, {}).values() if all(old.get(c) == row.get(c) for c in keep)), None)
        if same is None:
            return None
        dup = dup or {"table": table, "matches": {c: same.get(c) for c in keep if same.get(c) is not None}}
    return dup


def turns_needed(calls: int) -> int:
    """Turns an episode takes for a solution of `calls` tool calls: list_tools first, one call a turn, the answer."""
    return calls + 2


def answers_in_tools(lits: list[Literal], tool_specs: dict[str, dict[str, Any]],
                     api_spec: dict[str, Any] | None) -> list[dict[str, str]]:
    """Literals of a task (a SKU, an email, a name it states) that a tool's description or schema examples show
    the agent before it has looked anything up (enum lists excluded: allowed values are no answer)."""
    texts: dict[str, dict[str, str]] = {}
    for name, spec in tool_specs.items():
        texts.setdefault(name, {})["description"] = norm(spec.get("description") or "")
        texts[name]["schema"] = norm(json.dumps(_without_enums(spec.get("input_schema") or {}), ensure_ascii=False))
    for group in (api_spec or {}).get("api_groups", []) if isinstance(api_spec, dict) else []:
        for ep in group.get("endpoints", []) if isinstance(group, dict) else []:
            op = ep.get("operation_id") if isinstance(ep, dict) else None
            if not isinstance(op, str) or not op:
                continue
            params = ep.get("request_params") or {}
            examples = [str(p.get("example")) for p in params.values() if isinstance(p, dict) and p.get("example")
                        is not None] if isinstance(params, dict) else []
            texts.setdefault(op, {})["api spec examples"] = norm(" | ".join(examples))
    out = []
    for lit in lits:
        key = norm(lit.text)
        specific = lit.kind in ("code", "email") or (lit.kind == "text" and len(key) >= 4 and (
            " " in key or any(ch.isdigit() for ch in lit.text)))  # one word (`Medical`) may be a category
        if not specific:
            continue
        for name, fields in texts.items():
            where = next((f for f, text in fields.items() if _holds(text, key)), None)
            if where:
                out.append({"literal": lit.text, "tool": name, "where": where})
    return out


def _holds(text: str, key: str) -> bool:
    return bool(re.search(r"(?<![\w])" + re.escape(key) + r"(?![\w])", text))


def _without_enums(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_enums(v) for k, v in node.items() if k != "enum"}
    if isinstance(node, list):
        return [_without_enums(v) for v in node]
    return node


def api_spec_descriptions(api_spec: Any) -> dict[str, str]:
    """operation_id -> summary and description, from an API spec in the AWM format."""
    out: dict[str, str] = {}
    groups = api_spec.get("api_groups", []) if isinstance(api_spec, dict) else []
    for group in groups:
        for ep in (group.get("endpoints") or []) if isinstance(group, dict) else []:
            if isinstance(ep, dict) and isinstance(ep.get("operation_id"), str):
                out[ep["operation_id"]] = f"{ep.get('summary') or ''}. {ep.get('description') or ''}"
    return out


def link_task(task: str, tools: dict[str, dict[str, Any]], index: RowIndex, nouns: set[str],
              solution_tools: list[str] | None, api_spec: Any = None) -> dict[str, Any]:
    """What one task needs and what stands in its way: `tools` is the probe's result per tool (status, errors,
    accepted, writes, and `description` or `spec`); `solution_tools` the tools its reference solution calls."""
    lits = task_literals(task, nouns)
    if solution_tools is not None:
        needed, source = sorted(set(solution_tools)), "reference solution"
    else:
        needed, source = tools_from_text(task, tools), "task text"
    broken = {n: why for n in needed if n in tools and (why := broken_reason(n, tools[n]))}
    missing = missing_rows(lits, index)
    out: dict[str, Any] = {"needs_tools": needed, "needs_tools_from": source,
                           "presupposes": [lit.text for lit in lits if lit.role == "reference" and lit.strong]}
    if broken:
        out["broken_tools"] = broken
    if missing:
        out["missing_rows"] = missing
    met = goal_met_rows(task, lits, needed, tools, index)
    if met:
        out["goal_met_rows"] = met
    specs = {n: t.get("spec") or {"description": t.get("description") or ""} for n, t in tools.items()}
    leaked = answers_in_tools(lits, specs, api_spec)
    if leaked:
        out["answers_in_tools"] = leaked[:MAX_LEAKS_SHOWN]
    return out


def episode_turn_limit() -> int:
    """The agent loop's turn limit (`LoopConfig.max_turns`), which a proof must fit in."""
    from awm_rl.agent.loop import LoopConfig

    return int(LoopConfig.max_turns)


def link_tasks(tasks: list[tuple[int, str]], probe: dict[str, dict[str, Any]], solutions: dict[int, Any],
               initial_db: Path, api_spec: Any = None) -> dict[int, dict[str, Any]]:
    """`link_task` for every (task_idx, task) of one environment; `solutions`: task_idx -> ReferenceSolution."""
    index = RowIndex.read(initial_db)
    nouns = entity_nouns(list(index.columns))
    described = api_spec_descriptions(api_spec)
    tools = {n: {**t, "description": " ".join(filter(None, [(t.get("spec") or {}).get("description"),
                                                              described.get(n)]))}
             for n, t in probe.items()}
    out = {}
    for idx, task in tasks:
        sol = solutions.get(idx)
        out[idx] = link_task(task, tools, index, nouns, [c.tool for c in sol.calls] if sol is not None else None,
                             api_spec)
    return out


def apply_agent_evidence(tasks: list[dict[str, Any]], evidence: dict[int, dict[str, list[dict[str, Any]]]]) -> None:
    """Agent episodes as evidence (awm_rl.quality.proofs.agent_evidence): an eligible task that no proof backs, whose
    agent episode ended on server errors, is `blocked` by that tool, naming the episode; episodes that said the
    task was done while the verifier disagreed are listed on the task (`agent_review`) for a person to read."""
    for task in tasks:
        found = evidence.get(task["task_idx"])
        if not found:
            continue
        if found["review"]:
            task["agent_review"] = found["review"]
        if found["blocked"] and task["verdict"] == "ok" and task.get("solvable") != "yes":
            first = found["blocked"][0]
            task.update(verdict="blocked", blocked_by="tool", eligible=False, agent_blocked=found["blocked"],
                        reason=f"an agent's episode ({first['policy']}, run {first['run']}) ended on server "
                               f"errors: {first['detail']}")


def _rows_text(rows: list[dict[str, Any]]) -> str:
    return "; ".join(f"{r['table']} row {r.get('rowid', '?')} ("
                     + ", ".join(f"{c}={str(v)[:60]!r}" for c, v in list(r["matches"].items())[:4]) + ")"
                     for r in rows)


def apply_links(tasks: list[dict[str, Any]], links: dict[int, dict[str, Any]], runs: dict[str, dict[str, Any]],
                max_turns: int | None = None) -> None:
    """Put each task's links on its result and decide: a proof over the turn limit is no proof; a proof that only
    duplicates an existing row, or (unproven) rows that already hold what the task asks, make it `goal_met`; a
    broken needed tool or a missing presupposed row (unproven) make it `blocked` (`blocked_by`: tool, data;
    `writes` for the write-coverage check). Verdicts about the verifier itself (missing, crash, vacuous,
    nondeterministic) stay first."""
    for task in tasks:
        link = links.get(task["task_idx"])
        if link is None:
            continue
        task.update(link)
        run = runs.get(str(task["task_idx"]))
        if run is not None and task.get("solvable") == "yes":
            limit = max_turns if max_turns is not None else episode_turn_limit()
            turns = turns_needed(len(run["calls"]))
            if turns > limit:
                task.update(solvable="unverified", over_turn_limit=True,
                            solution_detail=f"the reference solution takes {len(run['calls'])} calls: {turns} turns "
                                            f"with list_tools and the final answer, over the episode's {limit}: "
                                            f"no proof")
            elif (dup := duplicate_only(run)) is not None:
                task.update(solvable="no", goal_met_rows=[dup],
                            solution_detail=f"the reference solution only adds a copy of an existing "
                                            f"{dup['table']} row: no proof ({_rows_text([dup])})")
        proven = task.get("solvable") == "yes"
        if task["verdict"] == "blocked":
            task["blocked_by"] = "writes"
        if task["verdict"] not in ("ok", "blocked", "unsolvable"):
            continue
        if task.get("goal_met_rows") and not proven:
            task.update(verdict="goal_met", reason="the goal already holds in the initial data: "
                                                   + _rows_text(task["goal_met_rows"]))
        elif task["verdict"] == "blocked":
            pass  # the write-coverage verdict says it already, with its own evidence
        elif link.get("broken_tools") and not proven:
            name, why = next(iter(link["broken_tools"].items()))
            task.update(verdict="blocked", blocked_by="tool",
                        reason=f"needs tool {name} (from its {link['needs_tools_from']}): {why}")
        elif link.get("missing_rows") and not proven:
            task.update(verdict="blocked", blocked_by="data", reason="; ".join(m["reason"] for m in link["missing_rows"]))
        task["eligible"] = task["verdict"] == "ok"
