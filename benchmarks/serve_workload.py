"""The workload both sides of `awm bench serve` run, and the record of how it went.

Each scenario's script of tool calls is discovered through the pool from its tools (read tools, and write tools
whose schema examples succeed twice, carrying a per-instance marker so that the isolation check can tell whose
write landed where); the ours and baseline sides replay the same script. `Failures` records, per side, the first
failure of each scenario and its answered and refused calls; the percentiles and short error texts are what both
sides' reports are made of.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path
from typing import Any

MARK = "awmiso"  # the marker written by the workload's writes: f"{MARK}-{instance}"


def percentile(values: list[float], q: float) -> float | None:
    """The `q` quantile of the samples (the nearest one, rounded), None without samples."""
    if not values:
        return None
    xs = sorted(values)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def p50(values: list[float]) -> float | None:
    """The median of the samples (rounded), None without samples."""
    return round(statistics.median(values), 4) if values else None


def short_error(text: Any, limit: int = 300) -> str:
    """The first line of an error text, cut to `limit` characters (import errors carry whole tracebacks)."""
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


class Failures:
    """Scenarios that failed on one side: the first failure of each (phase, what happened), the calls each
    scenario answered and the 4xx answers it gave (the script's errors, not failures)."""

    def __init__(self, side: str):
        self.side = side
        self.entries: dict[str, dict[str, str]] = {}
        self.calls: dict[str, int] = {}
        self.refused: dict[str, int] = {}

    def answered(self, scenario: str, status: int) -> None:
        """One call of `scenario` answered (2xx or 4xx)."""
        self.calls[scenario] = self.calls.get(scenario, 0) + 1
        if status >= 400:
            self.refused[scenario] = self.refused.get(scenario, 0) + 1

    def fail(self, scenario: str, phase: str, what: str, *, counted: bool = True) -> None:
        """Record `scenario`'s first failure; `counted` adds "during <phase> after N calls"."""
        if scenario in self.entries:
            return
        if counted:
            what = f"{what.rstrip('. ')} during {phase} after {self.calls.get(scenario, 0)} calls"
        self.entries[scenario] = {"scenario": scenario, "side": self.side, "phase": phase, "what": what}

    def any_of(self, scenarios: list[str]) -> list[str]:
        return [s for s in scenarios if s in self.entries]

    def __contains__(self, scenario: str) -> bool:
        return scenario in self.entries


def _marker_field(tool: dict[str, Any], args: dict[str, Any]) -> str | None:
    """A free-text string argument we can replace with a marker (no enum/format/pattern)."""
    props = tool["input_schema"].get("properties", {})
    for name, value in args.items():
        prop = props.get(name, {})
        if (isinstance(value, str) and prop.get("type") == "string" and not
                any(k in prop for k in ("enum", "format", "pattern", "const", "maxLength"))):
            return name
    return None


def text_markers(db_path: Path) -> set[str]:
    """Every marker value found in any text column of the database."""
    found: set[str] = set()
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        for t in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            for c in cols:
                for (v,) in conn.execute(f'SELECT "{c}" FROM "{t}" WHERE typeof("{c}")=\'text\' AND "{c}" LIKE \'%{MARK}-%\''):
                    for part in v.split():
                        if part.startswith(f"{MARK}-"):
                            found.add(part.strip(".,;:'\""))
    finally:
        conn.close()
    return found


def discover_script(pool: Any, scenario: str) -> dict[str, Any]:
    """Read calls of `scenario` that succeed from the initial state and write calls that succeed twice (through
    the pool); `errors` keeps what the first failing probes answered, for the report when no read tool works."""
    from awm_rl.runtime.pool import PoolError
    from awm_rl.runtime.tools import example_arguments, looks_read_only

    h = pool.acquire(scenario)
    try:
        tools = pool.list_tools(h)
        reads: list[dict[str, Any]] = []
        writes: list[dict[str, Any]] = []
        errors: list[str] = []
        for tool in tools:
            args = example_arguments(tool["input_schema"])
            if args is None:
                continue
            is_read = looks_read_only(tool["name"])
            field = None if is_read else _marker_field(tool, args)
            if field:
                args = {**args, field: f"{MARK}-probe"}
            pool.reset(h)  # also replaces the instance if a probe before this one ended its worker
            r = pool.call_tool(h, tool["name"], args)
            if not r.ok:
                if len(errors) < 2:
                    errors.append(f"{tool['name']}: {short_error(r.text, 150)}")
                continue
            if is_read:
                reads.append({"tool": tool["name"], "args": args})
            elif field:
                try:
                    _, final = pool.snapshot(h)
                except PoolError:
                    continue  # the write ended its worker after answering: not a write to measure with
                # the workload repeats each write on one database: one that works only once (a unique
                # value in its example arguments) would fail every later call on both sides
                again = pool.call_tool(h, tool["name"], {**args, field: f"{MARK}-probe2"})
                if f"{MARK}-probe" in text_markers(final) and again.ok:
                    writes.append({"tool": tool["name"], "args": args, "field": field})
        pool.reset(h)
    finally:
        pool.release(h)
    return {"scenario": scenario, "reads": reads, "writes": writes, "tools": len(tools), "errors": errors}


def instance_script(info: dict[str, Any], i: int) -> list[tuple[str, dict[str, Any]]]:
    """Instance i's workload: read, marked write, read, read."""
    reads = info["reads"]
    calls = [(reads[i % len(reads)]["tool"], reads[i % len(reads)]["args"])]
    if info["writes"]:
        w = info["writes"][i % len(info["writes"])]
        calls.append((w["tool"], {**w["args"], w["field"]: f"{MARK}-{i}"}))
    calls.append((reads[(i + 1) % len(reads)]["tool"], reads[(i + 1) % len(reads)]["args"]))
    calls.append((reads[(i + 2) % len(reads)]["tool"], reads[(i + 2) % len(reads)]["args"]))
    return calls
