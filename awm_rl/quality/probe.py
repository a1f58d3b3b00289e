"""The tool probe: call every tool of a loaded environment with grounded and edge inputs, and classify it.

Runs inside the worker process that hosts the generated code (see `awm_rl.quality.envcheck`), each
call on a fresh instance of the environment. A tool's status, worst first:
- `server_error`: a valid input (arguments grounded in the database, including a create that repeats an
  existing unique row, which must answer 4xx) got HTTP 5xx or a timeout (exception, message, arguments kept);
- `shadowed`: an earlier route with the same method answers its requests, so it is unreachable;
- `writes_on_read`: a GET tool changed the database;
- `suspicious_empty`: a read tool answered only empty lists to arguments taken from existing rows;
- `server_error_on_edge`: only a mistaken input (an id that does not exist, a boundary number, a wrong
  type) got 5xx, where a 4xx would tell the agent what was wrong;
- `client_error_only`: no valid input was accepted (all 4xx), which may be our grounding, not a bug;
- `ok`: a valid input succeeded and nothing above happened.
Each tool also reports the tables its successful calls wrote, for the task write-coverage check.

A tool that accepts none of its first grounded inputs is tried further until one is accepted (at most
RETRY_CALLS more, and EXTRA_CALLS_PER_TOOL per tool for the whole environment): other rows, other
links, fresh names for a create or rename (`arguments.retry_sets`); last, once every tool has been
probed, after another write tool that worked, run just before on the same instance (the id of the row
a create made, a state a write set). Only then is it `client_error_only`,
its note naming the inputs tried and the distinct answers it got.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any, overload

from awm_rl.quality.arguments import ArgSet, args_key, created_ids, edge_sets, grounded_sets, retry_sets
from awm_rl.quality.dbfacts import DbFacts

BUG_STATUSES = ("server_error", "shadowed", "writes_on_read", "suspicious_empty", "server_error_on_edge")
STATUS_ORDER = (*BUG_STATUSES, "client_error_only", "ok", "not_probed")
MAX_ERRORS_KEPT = 5
RETRY_CALLS = 8  # more valid inputs for a tool that accepted none, until one is accepted
CHAIN_CALLS = 3  # calls after another write tool (a create's new id, a changed state), per tool still accepting none
EXTRA_CALLS_PER_TOOL = 4  # retries and chained calls of a whole environment, per tool: an env whose tools all
# answer 4xx (a missing header, say) costs at most that many more calls, each env_code attempt stays fast


@dataclass
class ProbeCall:
    kind: str
    args: dict[str, Any]
    status_code: int
    ms: float
    error: str | None = None
    wrote: list[str] = field(default_factory=list)
    empty: bool = False
    row_grounded: bool = False


@dataclass
class ToolReport:
    name: str
    method: str
    path: str
    status: str = "not_probed"
    calls: int = 0
    ok_calls: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    shadowed_by: str | None = None
    note: str | None = None
    accepted: dict[str, Any] | None = None  # the first valid input accepted: {"input": kind, "args": ...}
    spec: dict[str, Any] = field(default_factory=dict)  # name, description, input_schema: what an agent sees

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def table_digests(conn) -> dict[str, str]:
    """A digest of every table's rows (order-independent), to see which tables a call wrote."""
    out = {}
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    for name in names:
        rows = conn.execute('SELECT * FROM "' + name.replace('"', '""') + '"').fetchall()
        out[name] = hashlib.sha1(repr(sorted(map(repr, rows))).encode()).hexdigest()
    return out


def _only_empty_lists(text: str) -> bool:
    """The JSON answer holds lists and every one of them is empty, and no record beside them (an object
    with an id: an issue found by its key, whose labels and links are empty lists, is an answer)."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    lists: list[list] = []
    records = 0

    def walk(node: Any) -> None:
        nonlocal records
        if isinstance(node, list):
            lists.append(node)
            for v in node:
                walk(v)
        elif isinstance(node, dict):
            records += any((k == "id" or k.endswith("_id")) and v is not None for k, v in node.items())
            for v in node.values():
                walk(v)

    walk(data)
    return bool(lists) and not records and all(len(x) == 0 for x in lists)


@overload
def _call(host: Any, tool_name: str, argset: ArgSet, before: dict[str, str], setup: None = None) -> ProbeCall: ...
@overload
def _call(host: Any, tool_name: str, argset: ArgSet, before: dict[str, str], setup: Any) -> ProbeCall | None: ...
def _call(host: Any, tool_name: str, argset: ArgSet, before: dict[str, str],
          setup: Any = None) -> ProbeCall | None:
    """One call on a fresh instance. `setup(iid)`, when given, runs first on that instance and returns
    the argument set to send (None: no call); the tables written are then those the call itself wrote."""
    iid = host.create_instance()
    try:
        if setup is not None:
            argset = setup(iid)
            if argset is None:
                return None
            before = table_digests(host.connection(iid))
        t0 = time.perf_counter()
        result = host.call_tool(iid, tool_name, argset.args)
        ms = (time.perf_counter() - t0) * 1000
        call = ProbeCall(argset.kind, argset.args, result.status, round(ms, 2), row_grounded=argset.row_grounded)
        if result.status >= 500:
            call.error = result.detail or result.text[:500]
        elif result.status >= 400:
            call.error = result.text[:300]
        else:
            call.empty = _only_empty_lists(result.text)
        conn = None if result.status == 504 else host.connection(iid)
        if conn is not None and conn.total_changes:
            after = table_digests(conn)
            call.wrote = sorted(t for t, d in after.items() if before.get(t) != d)
        return call
    finally:
        host.release(iid)


def classify(report: ToolReport, calls: list[ProbeCall], *, read_only: bool) -> None:
    """Set `report.status` and its evidence from the calls made."""
    report.calls = len(calls)
    ok_calls = [c for c in calls if c.status_code < 400]
    report.ok_calls = len(ok_calls)
    server = [c for c in calls if c.status_code >= 500]
    report.errors = [{"args": c.args, "status_code": c.status_code, "error": c.error, "input": c.kind}
                     for c in (server or [c for c in calls if c.status_code >= 400])[:MAX_ERRORS_KEPT]]
    report.writes = sorted({t for c in ok_calls for t in c.wrote})
    valid_ok = [c for c in ok_calls if c.kind.startswith("valid")]
    report.accepted = {"input": valid_ok[0].kind, "args": valid_ok[0].args} if valid_ok else None
    if not valid_ok and not server:  # the distinct answers, not five copies of one
        distinct = {(c.status_code, c.error): c for c in calls if c.kind.startswith("valid")}
        report.errors = [{"args": c.args, "status_code": c.status_code, "error": c.error, "input": c.kind}
                         for c in list(distinct.values())[:MAX_ERRORS_KEPT]] or report.errors
    if any(c.kind.startswith("valid") or c.kind == "edge:duplicate" for c in server):
        report.status = "server_error"
    elif report.shadowed_by:
        report.status = "shadowed"
    elif read_only and report.writes:
        report.status = "writes_on_read"
        report.note = f"a {report.method} call changed table(s) {', '.join(report.writes)}"
    elif read_only and valid_ok and all(c.empty for c in valid_ok) and any(c.row_grounded for c in valid_ok):
        report.status = "suspicious_empty"
        report.note = "every valid call answered only empty lists, also to filters copied from an existing row"
    elif server:
        report.status = "server_error_on_edge"
    elif not valid_ok:
        report.status = "client_error_only"
        tried = [c.kind for c in calls if c.kind.startswith("valid")]
        how = dict.fromkeys(re.sub(r"#\d+", "", k.split(":", 1)[-1]) for k in tried)
        answers = "; ".join(f"{e['status_code']} {str(e['error'] or '')[:120]}" for e in report.errors[:3])
        report.note = f"none of {len(tried)} valid inputs was accepted ({', '.join(how)}); answers: {answers}"
    else:
        report.status = "ok"


def _accepted(calls: list[ProbeCall]) -> bool:
    return any(c.kind.startswith("valid") and c.status_code < 400 for c in calls)


@dataclass
class _Allowance:
    """Extra calls (retries, chained calls) left to the whole probe, and its deadline."""

    calls: int
    until: float

    def spend(self) -> bool:
        if self.calls <= 0 or time.monotonic() > self.until:
            return False
        self.calls -= 1
        return True


def _retry(host: Any, name: str, tool: Any, facts: DbFacts, calls: list[ProbeCall], before: dict[str, str],
           allowance: _Allowance) -> None:
    """Further valid inputs for a tool that accepted none, until one is accepted (or answers 5xx)."""
    sent = {args_key(c.args) for c in calls}
    made = 0
    for argset in retry_sets(tool, facts):
        if made >= RETRY_CALLS:
            return
        if args_key(argset.args) in sent:
            continue
        if not allowance.spend():
            return
        sent.add(args_key(argset.args))
        call = _call(host, name, argset, before)
        calls.append(call)
        made += 1
        if call.status_code < 400 or call.status_code >= 500:
            return


def _new_row(conn: Any, table: str, after_rowid: int) -> dict[str, Any] | None:
    """The last row of `table` past `after_rowid` (a row the setup call inserted)."""
    cur = conn.execute(f'SELECT * FROM "{table}" WHERE rowid > ? ORDER BY rowid DESC LIMIT 1', (after_rowid,))
    row = cur.fetchone()
    return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))


def _chain(host: Any, name: str, tool: Any, facts: DbFacts, calls: list[ProbeCall],
           writers: dict[str, tuple[dict[str, Any], list[str]]], top_rowid: dict[str, int],
           allowance: _Allowance) -> None:
    """States no stored row is in: run a write tool that worked, then this tool on the same instance,
    with the id of the row a create made, else with the input that answered a conflict (a project with
    an active sprint starts another once a write completed the first)."""
    ids = created_ids(tool, facts)
    about = {t for t, _ in ids.values()}
    valid = [c for c in calls if c.kind.startswith("valid")]
    retry = next((c.args for c in valid if c.status_code == 409), None) or \
        next((c.args for c in valid if c.kind.startswith("valid:all")), valid[0].args if valid else {})
    order = sorted(writers, key=lambda w: (not (set(writers[w][1]) & about & set(top_rowid)), w))
    made = 0
    for writer in order:
        args, wrote = writers[writer]
        if made >= CHAIN_CALLS or writer == name or not set(wrote) & (about or set(wrote)):
            continue
        if not allowance.spend():
            return
        made_in = [t for t in wrote if t in about and t in top_rowid]

        def setup(iid: str, writer=writer, args=args, made_in=made_in) -> ArgSet | None:
            if host.call_tool(iid, writer, args).status >= 400:
                return None
            new = {}
            for table in made_in:
                row = _new_row(host.connection(iid), table, top_rowid[table])
                new.update({p: row[c] for p, (t, c) in ids.items() if row and t == table and row.get(c) is not None})
            return ArgSet(f"valid:after:{writer}", {**retry, **new})

        call = _call(host, name, ArgSet("", {}), {}, setup=setup)
        made += 1
        if call is not None:
            calls.append(call)
            if call.status_code < 400 or call.status_code >= 500:
                return


def _top_rowids(conn: Any) -> dict[str, int]:
    """Each rowid table's largest rowid in the template (rows past it were made by a call)."""
    out = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"):
        try:
            out[table] = conn.execute(f'SELECT COALESCE(MAX(rowid), 0) FROM "{table}"').fetchone()[0]
        except sqlite3.OperationalError:  # a WITHOUT ROWID table: no new row can be told apart this way
            continue
    return out


def probe_host(host: Any, facts: DbFacts, *, budget_s: float = 60.0) -> dict[str, ToolReport]:
    """Probe every tool of `host` (a `ScenarioHost`); tools left when the budget runs out stay `not_probed`."""
    from awm_rl.runtime.db import open_instance_db

    template = open_instance_db(host.template)
    try:
        before = table_digests(template)
        top_rowid = _top_rowids(template)
    finally:
        template.really_close()
    reports: dict[str, ToolReport] = {}
    all_calls: dict[str, list[ProbeCall]] = {}
    until = time.monotonic() + budget_s
    allowance = _Allowance(EXTRA_CALLS_PER_TOOL * len(host.tools), until)
    for name, tool in host.tools.items():
        report = reports[name] = ToolReport(name, tool.method, tool.path, shadowed_by=tool.shadowed_by,
                                            spec=tool.spec())
        if time.monotonic() > until:
            report.note = f"probe budget of {budget_s:g}s spent before this tool"
            continue
        valid = grounded_sets(tool, facts)
        calls = all_calls[name] = []
        for argset in valid:
            calls.append(_call(host, name, argset, before))
            if calls[-1].status_code == 504:  # a hang: one is enough evidence, and each costs the full deadline
                break
        base = next((a.args for a in valid if a.kind.startswith("valid:all")), valid[0].args if valid else {})
        if not _accepted(calls) and not any(c.status_code >= 500 for c in calls):
            _retry(host, name, tool, facts, calls, before, allowance)
            base = next((c.args for c in calls if c.kind.startswith("valid") and c.status_code < 400), base)
        if all(c.status_code != 504 for c in calls):
            for argset in edge_sets(tool, facts, base):
                calls.append(_call(host, name, argset, before))
                if calls[-1].status_code == 504:
                    break
        classify(report, calls, read_only=tool.method == "GET")
    writers = {n: (c.args, c.wrote) for n, calls in all_calls.items() if host.tools[n].method != "GET"
               for c in calls[::-1] if c.kind.startswith("valid") and c.status_code < 400 and c.wrote}
    for name, calls in all_calls.items():
        if reports[name].status == "client_error_only":
            _chain(host, name, host.tools[name], facts, calls, writers, top_rowid, allowance)
            classify(reports[name], calls, read_only=host.tools[name].method == "GET")
    return reports
