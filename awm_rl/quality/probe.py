"""The tool probe: call every tool of a loaded environment with grounded and edge inputs, and classify it.

Runs inside the worker process that hosts the generated code (see `awm_rl.runtime.check`), each
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
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from awm_rl.quality.arguments import ArgSet, edge_sets, grounded_sets
from awm_rl.quality.dbfacts import DbFacts

BUG_STATUSES = ("server_error", "shadowed", "writes_on_read", "suspicious_empty", "server_error_on_edge")
STATUS_ORDER = (*BUG_STATUSES, "client_error_only", "ok", "not_probed")
MAX_ERRORS_KEPT = 5


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
    """The JSON answer holds lists and every one of them is empty (and no non-empty object beside)."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    lists: list[list] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            lists.append(node)
            for v in node:
                walk(v)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)

    walk(data)
    return bool(lists) and all(len(x) == 0 for x in lists)


def _call(host: Any, tool_name: str, argset: ArgSet, before: dict[str, str]) -> ProbeCall:
    iid = host.create_instance()
    try:
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
    else:
        report.status = "ok"


def probe_host(host: Any, facts: DbFacts, *, budget_s: float = 60.0) -> dict[str, ToolReport]:
    """Probe every tool of `host` (a `ScenarioHost`); tools left when the budget runs out stay `not_probed`."""
    from awm_rl.runtime.db import open_instance_db

    template = open_instance_db(host.template)
    try:
        before = table_digests(template)
    finally:
        template.really_close()
    reports: dict[str, ToolReport] = {}
    until = time.monotonic() + budget_s
    for name, tool in host.tools.items():
        report = reports[name] = ToolReport(name, tool.method, tool.path, shadowed_by=tool.shadowed_by,
                                            spec=tool.spec())
        if time.monotonic() > until:
            report.note = f"probe budget of {budget_s:g}s spent before this tool"
            continue
        valid = grounded_sets(tool, facts)
        base = next((a.args for a in valid if a.kind.startswith("valid:all")), valid[0].args if valid else {})
        calls: list[ProbeCall] = []
        for argset in [*valid, *edge_sets(tool, facts, base)]:
            calls.append(_call(host, name, argset, before))
            if calls[-1].status_code == 504:  # a hang: one is enough evidence, and each costs the full deadline
                break
        classify(report, calls, read_only=tool.method == "GET")
    return reports
