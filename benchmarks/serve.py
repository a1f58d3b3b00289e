"""`awm bench serve`: our runtime against the published way of serving environments, in one run.

Ours: the `EnvironmentPool` (Ray host actors, in-memory instance databases, in-process ASGI calls).
Baseline (the published AWM approach): one `python server.py` process (uvicorn) per instance on its
own SQLite file, tool calls over HTTP, reset = rebuild the database from its SQL. The published
path speaks MCP through fastapi-mcp, which does not work with mcp 2.x; plain HTTP to the same routes
is cheaper than MCP over HTTP, so the baseline's call numbers are if anything flattering.

Both sides run the same scripted workload, discovered from each scenario's tools: read tools and
write tools whose schema examples make a successful call; writes carry a per-instance marker so the
isolation check can tell whose write landed where. A scenario without such a read tool is reported under
`skipped` and left out of every measurement. Measurements:

- cold_start_ms: a scenario's code imported and ready on a warm host (ours) / `python server.py`
  from spawn to its first HTTP answer (baseline); create_ms_p50: one more instance ready with its
  own database (ours: create + copy the database; baseline: copy the file + start a server).
- reset_ms_p50: ours inside the host (and through Ray as pool_reset_ms_p50); baseline SQL rebuild
  (schema.sql + sample.sql, or the SQL dump of initial.db where a scenario has no schema.sql).
- call_ms_p50/p99: one call at a time from the client (ours through Ray; host_call_ms_* inside it).
- throughput_calls_per_s: every workload instance runs its script concurrently.
- memory: resident set of every process involved (ours: host actors, their sandboxed scenario workers
  and Ray's own processes; baseline: the server processes) plus database copies not already in a
  resident set (baseline files); the baseline runs fewer instances (at least one per scenario) and is
  extrapolated per instance, as the JSON says. `total_mb` (the target) sums resident sets, which counts
  pages shared between processes once per process; `pss_mb_total` splits them (what the processes use
  together), and `memory_by_process` lists rss/pss/uss per process. Instances beyond a worker's open
  budget are parked (`parked_databases`: their image only), so `db_mb_total` counts open and parked databases.

What an outside caller pays (`benchmarks.outside`): `awm_serve`, a read call and a reset through `awm serve` with
fastmcp's client and the plain `mcp` client, interleaved with the pool's own on the first measured scenario
(p50/p99 each, and each client's p50 above the pool's); `verification`, code-mode verdicts on fresh episodes
through the warm verifier sandboxes against a fresh sandbox per verdict.

An OpenEnv-protocol server as a baseline (`--openenv-url URL`; OpenEnv's own Agent World Model server, which a
user runs from their copy of OpenEnv, or `awm serve --openenv`): `openenv_baseline`, its reset and a read call
interleaved with the pool's on the same scenario, N sessions opened at once against N pool instances, and with
`--openenv-pid` its memory per extra session. `--openenv-only` runs just that comparison (and its pool side).

Failures (environments written by others do fail): every call on both sides has a deadline
(`--call-timeout`). A scenario whose code does not import or whose server does not start, that offers no
callable read tool, whose server or worker dies or stops answering, or whose tool answers a 5xx or
something that is not JSON is listed under `left_out` (scenario, side, phase, what happened) and left out
of the comparison on both sides: samples taken one scenario at a time just drop it, and a side whose
all-at-once phases (throughput, memory, isolation) ran with it is measured again without it (`runs`).
A 4xx answer is the script's error, not the environment's: it is counted (`failed_calls_by_scenario`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import process_tree, rss_mb

MARK = "awmiso"
CALL_TIMEOUT_S = 10.0  # a call's deadline on both sides (`--call-timeout`)
START_TIMEOUT_S = 60.0  # a baseline server's start, from spawn to its OpenAPI document


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _short(text: Any, limit: int = 300) -> str:
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


def _ours_fault(tool: str, r: Any) -> str | None:
    """What went wrong with one of our calls, or None if it was answered (a 4xx is the caller's error)."""
    if r.ok or r.error_kind == "agent":
        return None
    if r.detail:
        return f"tool {tool} answered HTTP {r.status} ({_short(r.detail, 200)})"
    return f"tool {tool} failed: {_short(r.text)}"


def _timed_fault(tool: str, t: Any) -> str | None:
    """`_ours_fault` for a `TimedResult` (a failed operation carries an `OpError` with its message)."""
    if hasattr(t.result, "error_kind"):
        return _ours_fault(tool, t.result)
    return None if t.ok else _short(getattr(t.result, "message", t.result))


# ---------------------------------------------------------------------------------------------
# workload discovery
def _marker_field(tool: dict[str, Any], args: dict[str, Any]) -> str | None:
    """A free-text string argument we can replace with a marker (no enum/format/pattern)."""
    props = tool["input_schema"].get("properties", {})
    for name, value in args.items():
        prop = props.get(name, {})
        if (isinstance(value, str) and prop.get("type") == "string" and not
                any(k in prop for k in ("enum", "format", "pattern", "const", "maxLength"))):
            return name
    return None


def _text_markers(db_path: Path) -> set[str]:
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


def _digest(db_path: Path) -> list:
    from awm_rl.runtime.db import database_digest

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return database_digest(conn)
    finally:
        conn.close()


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
                    errors.append(f"{tool['name']}: {_short(r.text, 150)}")
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
                if f"{MARK}-probe" in _text_markers(final) and again.ok:
                    writes.append({"tool": tool["name"], "args": args, "field": field})
        pool.reset(h)
    finally:
        pool.release(h)
    return {"scenario": scenario, "reads": reads, "writes": writes, "tools": len(tools), "errors": errors}


def _script(info: dict[str, Any], i: int) -> list[tuple[str, dict[str, Any]]]:
    """Instance i's workload: read, marked write, read, read."""
    reads = info["reads"]
    calls = [(reads[i % len(reads)]["tool"], reads[i % len(reads)]["args"])]
    if info["writes"]:
        w = info["writes"][i % len(info["writes"])]
        calls.append((w["tool"], {**w["args"], w["field"]: f"{MARK}-{i}"}))
    calls.append((reads[(i + 1) % len(reads)]["tool"], reads[(i + 1) % len(reads)]["args"]))
    calls.append((reads[(i + 2) % len(reads)]["tool"], reads[(i + 2) % len(reads)]["args"]))
    return calls


# ---------------------------------------------------------------------------------------------
# memory accounting
def _ray_processes() -> dict[int, str]:
    """pid -> role for every process of the local Ray node started by this driver (empty if remote)."""
    import psutil
    import ray._private.worker as ray_worker

    node = getattr(ray_worker, "_global_node", None)
    out: dict[int, str] = {}
    if node is None:
        return out
    try:
        live = node.live_processes()
    except Exception:  # noqa: BLE001 - Ray private API: no process list means no per-process figures
        return out
    for role, proc in live:
        out[proc.pid] = role
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                out.setdefault(child.pid, "worker")
        except psutil.Error:
            pass
    return out


def _with_descendants(pids: list[int]) -> list[int]:
    import psutil

    out = list(pids)
    for pid in pids:
        try:
            out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            pass
    return out


def _memory_by_process(roles: dict[int, str]) -> list[dict[str, Any]]:
    """rss / pss / uss (MB) per process with its role (and, for a sandboxed one, its scenario). PSS splits
    each shared page among the processes that map it, so PSS totals add up to the memory actually used; RSS
    totals count shared pages (the interpreter, libraries) once per process."""
    import psutil

    rows = []
    for pid, role in roles.items():
        try:
            proc = psutil.Process(pid)
            full = proc.memory_full_info()
            args = proc.cmdline()
        except psutil.Error:
            continue
        row: dict[str, Any] = {"pid": pid}
        if role == "sandboxed":  # bubblewrap, its PID-1 helper, or the scenario worker it runs
            worker = "awm_rl.runtime.actor" in args
            if worker:
                row["scenario"] = args[-1]
            role = (f"scenario worker {args[-1]}" if worker and os.path.basename(args[0]).startswith("python")
                    else "bubblewrap" + (f" ({args[-1]})" if worker else ""))
        rows.append({**row, "role": role, "rss_mb": round(full.rss / 2**20, 1),
                     "pss_mb": round(full.pss / 2**20, 1), "uss_mb": round(full.uss / 2**20, 1)})
    return rows


# ---------------------------------------------------------------------------------------------
# ours
def open_pool(store_root: Path, *, instances: int, num_hosts: int | None, call_timeout_s: float) -> tuple[Any, dict]:
    """The pool our side runs on, and what the report says about it (start time, hosts, OS isolation)."""
    from awm_rl.runtime.pool import EnvironmentPool

    t0 = time.perf_counter()
    pool = EnvironmentPool(store_root, num_hosts=num_hosts, max_instances=instances + 64, prefetch=4,
                           call_timeout_s=call_timeout_s)
    meta: dict[str, Any] = {"pool_start_ms": round((time.perf_counter() - t0) * 1000, 1), "hosts": pool.num_hosts}
    # OS isolation of the host workers ("bubblewrap": generated code runs in a sandboxed worker behind
    # a pipe from each host actor; "none: <reason>": in the actor under Python-level guards only)
    stats = pool.host_stats()
    meta["os_isolation"] = sorted({str(st.get("isolation")) for st in stats})[0]
    meta["seccomp"] = sorted({str(st.get("seccomp")) for st in stats})[0]  # applied by each scenario worker
    meta["limits"] = _limits()
    return pool, meta


def _limits() -> dict[str, Any]:
    """The resource bounds the hosts ran under: largest answer and request, scratch space of a worker."""
    from awm_resources import settings
    from awm_rl.isolation.sandbox import scratch_summary

    return {"max_answer_bytes": settings.max_answer_bytes(), "max_request_bytes": settings.max_request_bytes(),
            "scratch": scratch_summary("host")}


def start_ours(pool: Any, scenarios: list[str], failures: Failures) -> dict[str, Any]:
    """Import each scenario on one host (cold start) and discover its workload. A scenario that does not
    import, or offers no read tool that answers, is recorded in `failures` (and in `skipped`)."""
    cold, cold_cpu, home = {}, {}, {}
    for s in scenarios:  # cold start: the first acquire of each scenario imports it on one host
        try:
            h = pool.acquire(s)
        except Exception as exc:  # noqa: BLE001 - the pool's errors name the scenario and the cause
            failures.fail(s, "start", _short(exc), counted=False)
            continue
        home[s] = h.host  # host-level timings run there (a scenario's worker lives on its home hosts)
        cold[s] = round(pool.cold_start_ms(s), 1)
        cold_cpu[s] = round(pool.cold_start_ms(s, cpu=True), 1)
        pool.release(h)
    scripts, skipped = {}, []
    for s in home:  # every measurement calls a read tool of each scenario: one without any is left out
        try:
            info = discover_script(pool, s)
        except Exception as exc:  # noqa: BLE001 - recorded as this scenario's failure; the others go on
            failures.fail(s, "discovery", _short(exc), counted=False)
            continue
        if info["reads"]:
            scripts[s] = info
            continue
        reason = (f"no read-only tool among its {info['tools']} tool(s) answers a call built from its schema "
                  "examples" + (f" (e.g. {'; '.join(info['errors'])})" if info["errors"] else ""))
        skipped.append({"scenario": s, "reason": reason})
        failures.fail(s, "discovery", reason, counted=False)
    return {"cold": cold, "cold_cpu": cold_cpu, "home": home, "scripts": scripts, "skipped": skipped}


def _ours_host_timings(pool: Any, s: str, host: int, script: dict[str, Any], failures: Failures,
                       acc: dict[str, list[float]]) -> None:
    """Create / reset / read calls of one scenario timed inside its home host (phase "reset"); samples
    go to `acc` (this scenario's)."""
    from awm_rl.runtime.pool import CallOp, CreateOp, OpenOp, ReleaseOp, ResetOp

    def bad(tool: str, t: Any) -> bool:
        fault = _timed_fault(tool, t)
        if fault:
            failures.fail(s, "reset", fault)
        elif hasattr(t.result, "status"):
            failures.answered(s, t.result.status)
        return fault is not None

    first = pool.run_timed(host, [CreateOp(s, 1)])[0]
    if bad("create", first):
        return
    ids = first.result
    for _ in range(20):
        created = pool.run_timed(host, [CreateOp(s, 1)])[0]
        if bad("create", created):
            return
        iid = created.result[0]
        opened = pool.run_timed(host, [OpenOp(iid)])[0]
        acc["creates"].append(created.wall_ms + opened.wall_ms)
        w = script["writes"][0] if script["writes"] else None
        ops = [CallOp(iid, w["tool"], {**w["args"], w["field"]: f"{MARK}-r"})] if w else []
        timed = pool.run_timed(host, ops + [ResetOp(iid), ReleaseOp(iid)])
        if (w and bad(w["tool"], timed[0])) or bad("reset", timed[-2]):
            return
        acc["resets"].append(timed[-2].wall_ms)
    # read calls inside the host, wall clock and CPU time (the CPU time is what the call costs when
    # nothing else competes for the cores)
    reads = [r["tool"] for r in script["reads"]] * 10
    ops = [CallOp(ids[0], r["tool"], r["args"]) for r in script["reads"]] * 10
    for tool, timed_read in zip(reads, pool.run_timed(host, ops), strict=True):
        if bad(tool, timed_read):
            return
        acc["host_wall"].append(timed_read.wall_ms)
        acc["host_cpu"].append(timed_read.cpu_ms)
    pool.run_timed(host, [ReleaseOp(ids[0])])


def _ours_latency(pool: Any, scripts: dict[str, Any], latency_calls: int, failures: Failures,
                  samples: dict[str, dict[str, list[float]]]) -> None:
    """One call at a time through the pool, then resets through the pool (phase "latency")."""
    handles = {}
    try:
        for s in scripts:
            try:
                handles[s] = pool.acquire(s)
            except Exception as exc:  # noqa: BLE001 - recorded as this scenario's failure; the others go on
                failures.fail(s, "latency", f"no instance: {_short(exc)}")
        reads_only = [(s, (r["tool"], r["args"])) for s in handles for r in scripts[s]["reads"]]
        for i in range(latency_calls if reads_only else 0):
            s, (tool, args) = reads_only[i % len(reads_only)]
            if s in failures:
                continue
            t = time.perf_counter()
            r = pool.call_tool(handles[s], tool, args)
            ms = (time.perf_counter() - t) * 1000
            fault = _ours_fault(tool, r)
            if fault:
                failures.fail(s, "latency", fault)
                continue
            failures.answered(s, r.status)
            samples[s]["lat"].append(ms)
            samples[s]["host_lat"].append(r.elapsed_ms)
        live = [s for s in handles if s not in failures]
        for i in range(min(200, latency_calls) if live else 0):
            s = live[i % len(live)]
            if s in failures:
                continue
            t = time.perf_counter()
            try:
                pool.reset(handles[s])
            except Exception as exc:  # noqa: BLE001 - a reset that cannot even replace the instance
                failures.fail(s, "latency", f"reset through the pool failed: {_short(exc)}")
                continue
            samples[s]["pool_reset"].append((time.perf_counter() - t) * 1000)
    finally:
        for h in handles.values():
            pool.release(h)


def _ours_memory(pool: Any, scenarios: list[str], instances: int, out: dict[str, Any]) -> None:
    """Resident sets of the host actors, their workers (those of measured scenarios) and Ray's processes."""
    stats = pool.host_stats()
    host_pids = _with_descendants([st["pid"] for st in stats if "pid" in st])  # actors and their workers
    ray_procs = _ray_processes()
    system_pids = [p for p in ray_procs if p not in host_pids]
    actors = {st["pid"] for st in stats if "pid" in st}
    host_rows = [r for r in _memory_by_process({p: "host actor" if p in actors else "sandboxed" for p in host_pids})
                 if r.get("scenario") in (None, *scenarios)]  # a left-out scenario's worker is not counted
    by_process = host_rows + _memory_by_process({p: f"ray {ray_procs[p]}" for p in system_pids})
    out["rss_mb_hosts"] = round(sum(r["rss_mb"] for r in host_rows), 1)
    out["rss_mb_ray_system"] = round(rss_mb(system_pids), 1)
    out["rss_mb_driver"] = round(rss_mb([os.getpid()]), 1)
    out["rss_mb_total"] = round(out["rss_mb_hosts"] + out["rss_mb_ray_system"], 1)
    out["pss_mb_total"] = round(sum(r["pss_mb"] for r in by_process), 1)
    out["memory_by_process"] = by_process
    per_scenario = [v for st in stats for s, v in st.get("scenarios", {}).items() if s in scenarios]
    out["live_databases"] = sum(v["live_dbs"] for v in per_scenario)
    out["parked_databases"] = sum(v.get("parked_dbs", 0) for v in per_scenario)
    out["db_mb_total"] = round(sum((v["live_dbs"] * v["template_kb"] + v.get("parked_kb", 0)) / 1024
                                   for v in per_scenario), 1)
    out["db_in_rss"] = True
    out["total_mb"] = out["rss_mb_total"]
    out["mb_per_instance"] = round(out["total_mb"] / instances, 4)
    out["mb_per_instance_hosts_only"] = round(out["rss_mb_hosts"] / instances, 4)


def _ours_first_writes(pool: Any, scripts: dict[str, Any], instances: int, failures: Failures,
                       out: dict[str, Any]) -> list[tuple[str, int, Any, Any]]:
    """Acquire every instance and make each one's marked write (its own database); (scenario, j, handle,
    first result) per instance (phase "isolation": the isolation check reads these writes back)."""
    scenarios = list(scripts)
    per = [instances // len(scenarios) + (1 if i < instances % len(scenarios) else 0) for i in range(len(scenarios))]
    t = time.perf_counter()
    all_handles: list[tuple[str, int, Any]] = []
    for s, k in zip(scenarios, per, strict=True):
        try:
            all_handles += [(s, j, h) for j, h in enumerate(pool.acquire_many(s, k))]
        except Exception as exc:  # noqa: BLE001 - recorded as this scenario's failure; the others go on
            failures.fail(s, "isolation", f"could not create {k} instances: {_short(exc)}")
    out["acquire_all_s"] = round(time.perf_counter() - t, 2)
    out["acquire_ms_mean"] = round((time.perf_counter() - t) * 1000 / max(1, instances), 4)

    def first_call(s: str, j: int) -> tuple[str, dict[str, Any]]:
        script = _script(scripts[s], j)
        return script[1] if len(script) > 3 else script[0]

    async def first_write() -> list:
        return await asyncio.gather(*(pool.call_tool_async(h, *first_call(s, j)) for s, j, h in all_handles))
    t = time.perf_counter()
    first = asyncio.run(first_write())
    out["materialize_all_s"] = round(time.perf_counter() - t, 2)
    out["first_write_ok"] = sum(1 for r in first if r.ok)
    for (s, j, _h), r in zip(all_handles, first, strict=True):
        fault = _ours_fault(first_call(s, j)[0], r)
        if fault:
            failures.fail(s, "isolation", fault)
        else:
            failures.answered(s, r.status)
    return [(s, j, h, r) for (s, j, h), r in zip(all_handles, first, strict=True)]


def _ours_throughput(pool: Any, scripts: dict[str, Any], picked: list[tuple[str, int, Any]],
                     failures: Failures, out: dict[str, Any]) -> None:
    """The picked instances run their scripts concurrently (phase "throughput")."""
    async def workload() -> tuple[int, int, float]:
        async def run(s: str, j: int, h: Any) -> tuple[int, int]:
            ok = n = 0
            for tool, args in _script(scripts[s], j + 100000):
                r = await pool.call_tool_async(h, tool, args)
                n += 1
                ok += r.ok
                fault = _ours_fault(tool, r)
                if fault:
                    failures.fail(s, "throughput", fault)
                    break
                failures.answered(s, r.status)
            return n, ok
        t0 = time.perf_counter()
        res = await asyncio.gather(*(run(s, j, h) for s, j, h in picked))
        return sum(r[0] for r in res), sum(r[1] for r in res), time.perf_counter() - t0
    n, ok, dt = asyncio.run(workload())
    out["workload_instances"] = len(picked)
    out["workload_calls"] = n
    out["workload_ok_calls"] = ok
    out["throughput_calls_per_s"] = round(n / dt, 1)


def ours_each(pool: Any, scripts: dict[str, Any], home: dict[str, int], *, latency_calls: int,
              failures: Failures) -> dict[str, Any]:
    """Our phases that visit one scenario at a time (reset, latency): per-scenario samples, which a scenario
    failing later just leaves out (`summarize_ours` pools those of the measured ones)."""
    samples: dict[str, dict[str, list[float]]] = {s: {k: [] for k in ("creates", "resets", "host_wall", "host_cpu", "lat", "host_lat", "pool_reset")}
               for s in scripts}
    for s in scripts:  # host-level create / reset / calls (timed inside the host actor)
        try:
            _ours_host_timings(pool, s, home[s], scripts[s], failures, samples[s])
        except Exception as exc:  # noqa: BLE001 - a host that did not answer, or died
            failures.fail(s, "reset", f"{type(exc).__name__}: {_short(exc)}")
    # the actor <-> isolated worker pipe, per batch (not part of the per-operation times above)
    pipe_ms = pool.host_stats()[0].get("pipe_ms_p50")
    _ours_latency(pool, {s: v for s, v in scripts.items() if s not in failures}, latency_calls, failures, samples)
    return {"samples": samples, "host_pipe_ms_p50": pipe_ms}


def ours_all(pool: Any, scripts: dict[str, Any], *, instances: int, workload_instances: int,
             isolation_instances: int, failures: Failures) -> dict[str, Any]:
    """Our phases with every instance at once: each acquired with one marked write, memory, isolation, then
    throughput. Valid only if none of `scripts`' scenarios fails, here or later (else run again without it)."""
    out: dict[str, Any] = {"instances": instances}
    held: list[tuple[str, int, Any]] = []
    try:
        written = _ours_first_writes(pool, scripts, instances, failures, out)
        held = [(s, j, h) for s, j, h, _r in written]
        if failures.any_of(list(scripts)):
            return out  # measured again without the scenario that failed
        _ours_memory(pool, list(scripts), instances, out)
        # isolation: each instance made exactly one marked write so far
        wrote = {id(h): (r.ok and bool(scripts[s]["writes"])) for s, _j, h, r in written}
        out["isolation"] = _isolation(pool, _spread(held, isolation_instances), wrote, failures)
        if failures.any_of(list(scripts)):
            return out
        # throughput: `workload_instances` instances (spread over scenarios) run their scripts concurrently
        _ours_throughput(pool, scripts, _spread(held, workload_instances), failures, out)
    finally:
        for _s, _j, h in held:
            pool.release(h)
    return out


def summarize_ours(each: dict[str, Any], everything: dict[str, Any], started: dict[str, Any],
                   scenarios: list[str], failures: Failures) -> dict[str, Any]:
    """Our report over the measured `scenarios`."""
    def pooled(key: str) -> list[float]:
        return [x for s in scenarios for x in each["samples"][s][key]]

    scripts = started["scripts"]
    cold = {s: started["cold"][s] for s in scenarios}
    lat, host_lat = pooled("lat"), pooled("host_lat")
    return {**everything, "scenarios": scenarios, "host_pipe_ms_p50": each["host_pipe_ms_p50"],
            "cold_start_ms_by_scenario": cold,
            "cold_start_cpu_ms_by_scenario": {s: started["cold_cpu"][s] for s in scenarios},
            "cold_start_ms": round(statistics.median(cold.values()), 1), "cold_start_ms_max": max(cold.values()),
            "workload": {s: {"reads": [r["tool"] for r in scripts[s]["reads"]],
                             "writes": [w["tool"] for w in scripts[s]["writes"]]} for s in scenarios},
            "create_ms_p50": _p50(pooled("creates")), "reset_ms_p50": _p50(pooled("resets")),
            "host_batch_call_ms_p50": _p50(pooled("host_wall")), "host_batch_call_cpu_ms_p50": _p50(pooled("host_cpu")),
            "call_ms_p50": _p50(lat), "call_ms_p99": _pct(lat, 0.99),
            "host_call_ms_p50": _p50(host_lat), "host_call_ms_p99": _pct(host_lat, 0.99),
            "pool_reset_ms_p50": _p50(pooled("pool_reset")),
            "failed_calls_by_scenario": {s: n for s, n in failures.refused.items() if s in scenarios}}


def _spread(items: list, n: int) -> list:
    """n items taken evenly across the list (so every scenario is represented)."""
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _isolation(pool: Any, handles: list[tuple[str, int, Any]], wrote: dict[int, bool],
               failures: Failures) -> dict[str, Any]:
    """Each instance holds only its own marker (if its marked write succeeded, else none); after reset
    each equals the initial database. A snapshot that fails is its scenario's failure (phase "isolation")."""
    async def snap_all() -> list:
        return await asyncio.gather(*(pool.snapshot_async(h) for _, _, h in handles), return_exceptions=True)

    def usable(s: str, snap: Any) -> bool:
        if isinstance(snap, BaseException):
            failures.fail(s, "isolation", f"snapshot failed: {_short(snap)}")
            return False
        return True

    snaps = asyncio.run(snap_all())
    own_only = writers = 0
    problems: list[str] = []
    for (s, j, h), snap in zip(handles, snaps, strict=True):
        if not usable(s, snap):
            continue
        expected = {f"{MARK}-{j}"} if wrote.get(id(h)) else set()
        writers += bool(expected)
        markers = _text_markers(snap[1]) - {f"{MARK}-probe", f"{MARK}-probe2"}
        if markers == expected:
            own_only += 1
        elif len(problems) < 5:
            problems.append(f"{h.instance_id}: expected {sorted(expected)}, found {sorted(markers)[:5]}")

    async def reset_all() -> None:
        await asyncio.gather(*(pool.reset_async(h) for _, _, h in handles), return_exceptions=True)
    asyncio.run(reset_all())
    snaps = asyncio.run(snap_all())
    initial_digest: dict[str, list] = {}
    equal = 0
    for (s, _j, h), snap in zip(handles, snaps, strict=True):
        if not usable(s, snap):
            continue
        if s not in initial_digest:
            initial_digest[s] = _digest(snap[0])
        if _digest(snap[1]) == initial_digest[s]:
            equal += 1
        elif len(problems) < 10:
            problems.append(f"{h.instance_id}: database differs from the initial one after reset")
    return {"instances": len(handles), "instances_with_writes": writers, "own_writes_only": own_only,
            "reset_equals_initial": equal, "ok": own_only == len(handles) and equal == len(handles) and writers > 0,
            "problems": problems}


# ---------------------------------------------------------------------------------------------
# baseline
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sql_statements(text: str) -> list[str]:
    out, buf = [], ""
    for line in text.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _reset_sql(folder: Path) -> tuple[list[str], list[str], str]:
    """The SQL the published reset replays: schema.sql + sample.sql, or (a scenario without schema.sql,
    e.g. one written by hand) the SQL dump of its initial database; and which one it is."""
    if (folder / "schema.sql").is_file():
        sample = folder / "sample.sql"
        return (_sql_statements((folder / "schema.sql").read_text(encoding="utf-8")),
                _sql_statements(sample.read_text(encoding="utf-8")) if sample.is_file() else [], "schema.sql")
    conn = sqlite3.connect(f"file:{folder / 'initial.db'}?mode=ro", uri=True)
    try:
        dump = [s for s in conn.iterdump() if s not in ("BEGIN TRANSACTION;", "COMMIT;")]
    finally:
        conn.close()
    return dump, [], "initial.db dump"


def _sql_rebuild(db: Path, schema: list[str], sample: list[str]) -> None:
    """The published reset: drop everything and replay the schema and sample SQL in place."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        names = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table','view') "
                             "AND name NOT LIKE 'sqlite_%'").fetchall()
        conn.execute("BEGIN")  # one transaction for everything: the fastest honest SQL replay
        for kind, name in names:
            conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        for stmt in schema:
            try:
                conn.execute(stmt)
            except sqlite3.Error:
                pass
        for stmt in sample:
            if stmt.upper().startswith("PRAGMA"):
                continue
            try:
                conn.execute(stmt)
            except sqlite3.Error:
                pass
        conn.execute("COMMIT")
    finally:
        conn.close()


class BaselineServer:
    """One `python server.py` process on its own database copy, and its HTTP client (every call with a
    deadline). Its errors are strings for the report: what happened, never a traceback."""

    def __init__(self, scenario: str, index: int, folder: Path, work: Path, call_timeout_s: float):
        import httpx

        self.scenario, self.i, self.timeout = scenario, index, call_timeout_s
        self.db = work / f"{scenario}-{index}.db"
        self.log = work / f"{scenario}-{index}.stderr"
        shutil.copyfile(folder / "initial.db", self.db)
        self.port = _free_port()
        env = {**os.environ, "DATABASE_PATH": f"sqlite:///{self.db}", "PORT": str(self.port), "HOST": "127.0.0.1"}
        with open(self.log, "wb") as err:  # uvicorn's access log goes to stdout, errors to stderr
            self.proc = subprocess.Popen([sys.executable, str(folder / "server.py")], cwd=work, env=env,
                                         stdout=subprocess.DEVNULL, stderr=err, preexec_fn=self._limit)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=call_timeout_s)
        self.routes: dict[str, Any] = {}

    @staticmethod
    def _limit() -> None:  # generated code: cap the server's address space, own process group
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, resource.RLIM_INFINITY))
        os.setsid()

    def wait_ready(self, tools: set[str], start_timeout_s: float) -> str | None:
        """Poll the OpenAPI document until the server answers; None when ready, else what went wrong."""
        import httpx

        from awm_rl.runtime.tools import tool_routes_from_openapi

        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            try:
                resp = self.client.get("/openapi.json")
                if resp.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                return f"server exited with status {self.proc.returncode} before answering{self.stderr_tail()}"
            time.sleep(0.005)
        else:
            return f"no answer to GET /openapi.json within {start_timeout_s:g} s"
        try:
            self.routes = tool_routes_from_openapi(resp.json())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return f"its OpenAPI document could not be read ({type(exc).__name__}: {_short(exc, 150)})"
        missing = sorted(tools - set(self.routes))
        return f"its OpenAPI document has no route for tool(s) {', '.join(missing)}" if missing else None

    def request(self, tool: str, args: dict[str, Any]) -> tuple[str, str, bytes | None, dict | None]:
        """(method, url, body, headers) of a tool call, built as an HTTP client would."""
        from awm_rl.runtime.tools import to_request

        req = to_request(self.routes[tool], args)
        url = req.path + (("?" + req.query.decode()) if req.query else "")
        return req.method, url, req.body, {"content-type": "application/json"} if req.body else None

    def stderr_tail(self) -> str:
        try:
            lines = [x for x in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                     if x.strip() and not x.startswith("INFO:")]  # uvicorn's start-up lines say nothing
        except OSError:
            return ""
        return f" (its stderr ended with: {_short(lines[-1], 200)})" if lines else ""

    def broken(self, exc: BaseException) -> str:
        """What a call that raised means: the server died, stopped answering, or dropped the connection.
        A server that is still up but failed is killed (it is left out; it must not hold the CPU)."""
        import httpx

        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            return f"server exited with status {code}{self.stderr_tail()}"
        self.kill()
        if isinstance(exc, httpx.TimeoutException):
            return f"no answer within {self.timeout:g} s"
        return f"connection failed ({type(exc).__name__}{': ' + _short(exc, 150) if str(exc) else ''})"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        self.client.close()
        self.kill()
        self.proc.wait()


def _answer_fault(tool: str, status: int, body: bytes) -> str | None:
    """A 5xx or a 2xx/3xx that is not JSON is the environment's failure; a 4xx is the script's error."""
    if status >= 500:
        return f"tool {tool} answered HTTP {status}"
    if status < 400:
        try:
            json.loads(body)
        except ValueError:
            return f"tool {tool} answered something that is not JSON ({body[:60]!r})"
    return None


def _baseline_call(srv: BaselineServer, tool: str, args: dict[str, Any], phase: str,
                   failures: Failures) -> float | None:
    """One call, timed (ms); None if it failed (recorded in `failures`)."""
    import httpx

    try:
        method, url, body, headers = srv.request(tool, args)
    except (ValueError, KeyError) as exc:
        failures.fail(srv.scenario, phase, f"could not build the request for {tool} ({_short(exc, 150)})")
        return None
    t = time.perf_counter()
    try:
        resp = srv.client.request(method, url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        failures.fail(srv.scenario, phase, srv.broken(exc))
        return None
    ms = (time.perf_counter() - t) * 1000
    fault = _answer_fault(tool, resp.status_code, resp.content)
    if fault:
        failures.fail(srv.scenario, phase, fault)
        return None
    failures.answered(srv.scenario, resp.status_code)
    return ms


def _baseline_throughput(servers: list[BaselineServer], scripts: dict[str, Any], failures: Failures,
                         out: dict[str, Any]) -> None:
    """Every server runs its instance's script repeatedly, concurrently (phase "throughput")."""
    import httpx

    async def run(srv: BaselineServer) -> int:
        n = 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.port}", timeout=srv.timeout) as ac:
            for rep in range(25):
                for tool, args in _script(scripts[srv.scenario], srv.i * 1000 + rep):
                    if srv.scenario in failures:
                        return n
                    try:
                        method, url, body, headers = srv.request(tool, args)
                        resp = await ac.request(method, url, content=body, headers=headers)
                    except httpx.HTTPError as exc:
                        failures.fail(srv.scenario, "throughput", srv.broken(exc))
                        return n
                    except (ValueError, KeyError) as exc:
                        failures.fail(srv.scenario, "throughput", f"could not build the request for {tool} "
                                                                  f"({_short(exc, 150)})")
                        return n
                    n += 1
                    fault = _answer_fault(tool, resp.status_code, resp.content)
                    if fault:
                        failures.fail(srv.scenario, "throughput", fault)
                        return n
                    failures.answered(srv.scenario, resp.status_code)
        return n

    async def workload() -> tuple[int, float]:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(run(srv) for srv in servers))
        return sum(counts), time.perf_counter() - t0
    n, dt = asyncio.run(workload())
    out["workload_calls"] = n
    out["throughput_calls_per_s"] = round(n / dt, 1)


def _baseline_memory(servers: list[BaselineServer], extrapolate_to: int, out: dict[str, Any]) -> None:
    rss = sum(rss_mb(process_tree(srv.proc.pid)) for srv in servers)
    db_mb = sum(srv.db.stat().st_size for srv in servers) / 2**20
    out["instances"] = len(servers)
    out["rss_mb_total"] = round(rss, 1)
    out["db_mb_total"] = round(db_mb, 2)
    out["total_mb"] = round(rss + db_mb, 1)
    out["mb_per_instance"] = round((rss + db_mb) / len(servers), 3)
    out["total_mb_extrapolated"] = round(out["mb_per_instance"] * extrapolate_to, 1)
    out["note"] = (f"measured on {len(servers)} instances; memory extrapolated linearly to {extrapolate_to} "
                   "(each instance is an independent process)")


class Baseline:
    """The baseline's servers for one benchmark run (at least one per scenario), measured like ours: `each()`
    the phases one scenario at a time (start, latency, reset: per-scenario samples), `all(live)` the phases
    with every server at once (throughput, memory), again if a scenario in them fails later."""

    def __init__(self, store_root: Path, scripts: dict[str, Any], *, instances: int, extrapolate_to: int,
                 latency_calls: int, call_timeout_s: float, failures: Failures,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.store_root, self.scripts, self.failures = store_root, scripts, failures
        self.instances, self.extrapolate_to, self.latency_calls = instances, extrapolate_to, latency_calls
        self.call_timeout_s, self.start_timeout_s = call_timeout_s, start_timeout_s
        self.work = Path(tempfile.mkdtemp(prefix="awm-bench-baseline-"))
        self.servers: list[BaselineServer] = []
        self.samples: dict[str, dict[str, Any]] = {s: {"creates": [], "lat": [], "resets": []} for s in scripts}
        self.sql: dict[str, tuple[list[str], list[str], str]] = {}

    def each(self) -> None:
        self._start()
        reads = [(srv, r) for srv in self.servers for r in self.scripts[srv.scenario]["reads"]]
        for i in range(self.latency_calls if reads else 0):  # latency: one call at a time
            srv, r = reads[i % len(reads)]
            if srv.scenario not in self.failures:
                ms = _baseline_call(srv, r["tool"], r["args"], "latency", self.failures)
                self.samples[srv.scenario]["lat"] += [ms] if ms is not None else []
        for srv in self.servers:  # reset: the published SQL rebuild, three times per server
            for _ in range(3 if srv.scenario not in self.failures else 0):
                t = time.perf_counter()
                if not self._rebuild(srv):
                    break
                self.samples[srv.scenario]["resets"].append((time.perf_counter() - t) * 1000)
        self._stop_left_out()

    def _start(self) -> None:
        scenarios = list(self.scripts)
        for i in range(max(self.instances, len(scenarios))):
            s = scenarios[i % len(scenarios)]
            if s in self.failures:
                continue
            t = time.perf_counter()
            srv = BaselineServer(s, i, self.store_root / "scenarios" / s, self.work, self.call_timeout_s)
            self.servers.append(srv)  # closed by close() whatever happens
            why = srv.wait_ready({r["tool"] for r in self.scripts[s]["reads"]} |
                                 {w["tool"] for w in self.scripts[s]["writes"]}, self.start_timeout_s)
            if why:
                self.failures.fail(s, "start", why, counted=False)
                continue
            ms = (time.perf_counter() - t) * 1000
            self.samples[s]["creates"].append(ms)
            self.samples[s].setdefault("cold", round(ms, 1))

    def _rebuild(self, srv: BaselineServer) -> bool:
        s = srv.scenario
        try:
            if s not in self.sql:
                self.sql[s] = _reset_sql(self.store_root / "scenarios" / s)
            _sql_rebuild(srv.db, *self.sql[s][:2])
            return True
        except (OSError, UnicodeDecodeError, sqlite3.Error) as exc:
            self.failures.fail(s, "reset", f"the SQL rebuild failed ({type(exc).__name__}: {_short(exc, 200)})")
            return False

    def _stop_left_out(self) -> None:
        """Servers of left-out scenarios stop here: they must not hold the CPU or count in memory."""
        for srv in self.servers:
            if srv.scenario in self.failures:
                srv.kill()

    def all(self, live: list[str]) -> dict[str, Any]:
        """Throughput then memory with the servers of the `live` scenarios, each on its initial database."""
        self._stop_left_out()
        servers = [srv for srv in self.servers if srv.scenario in live]
        servers = [srv for srv in servers if self._rebuild(srv)]
        out: dict[str, Any] = {}
        _baseline_throughput(servers, self.scripts, self.failures, out)
        self._stop_left_out()
        servers = [srv for srv in servers if srv.scenario not in self.failures]
        if servers:  # else measured again without the scenarios that failed
            _baseline_memory(servers, self.extrapolate_to, out)
        return out

    def close(self) -> None:
        for srv in self.servers:
            srv.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def summary(self, everything: dict[str, Any], scenarios: list[str]) -> dict[str, Any]:
        """The baseline's report over the measured `scenarios`."""
        def pooled(key: str) -> list[float]:
            return [x for s in scenarios for x in self.samples[s][key]]

        cold = {s: self.samples[s]["cold"] for s in scenarios}
        lat = pooled("lat")
        return {"extrapolated_to": self.extrapolate_to, **everything,
                "method": "one `python server.py` (uvicorn) process per instance on its own SQLite file; tool "
                          "calls as plain HTTP requests (cheaper than the published MCP over HTTP); reset = "
                          "rebuild the database from schema.sql + sample.sql (or the SQL dump of initial.db: "
                          "`reset_sql`)",
                "cold_start_ms_by_scenario": cold, "cold_start_ms": round(statistics.median(cold.values()), 1),
                "cold_start_ms_max": max(cold.values()), "create_ms_p50": _p50(pooled("creates")),
                "call_ms_p50": _p50(lat), "call_ms_p99": _pct(lat, 0.99), "reset_ms_p50": _p50(pooled("resets")),
                "reset_sql": {s: self.sql[s][2] for s in scenarios},
                "failed_calls_by_scenario": {s: n for s, n in self.failures.refused.items() if s in scenarios}}


# ---------------------------------------------------------------------------------------------
TARGETS = {
    "total_mb_4096_instances_le_2048": lambda o: o["instances"] >= 4096 and o["total_mb"] <= 2048,
    "reset_ms_p50_le_0.3": lambda o: o["reset_ms_p50"] <= 0.3,
    "host_call_ms_p50_le_1": lambda o: o["host_call_ms_p50"] <= 1.0,
    "call_ms_p50_through_ray_le_3": lambda o: o["call_ms_p50"] <= 3.0,
    "create_ms_p50_le_0.5": lambda o: o["create_ms_p50"] <= 0.5,
    "cold_start_ms_per_scenario_le_300": lambda o: o["cold_start_ms_max"] <= 300,
    "throughput_1024_instances_ge_1000": lambda o: o["workload_instances"] >= 1024 and o["throughput_calls_per_s"] >= 1000,
    "isolation": lambda o: o["isolation"]["ok"] and o["isolation"]["instances"] >= 1024,
}


# what an outside caller pays (`benchmarks.outside`): `awm serve` per call against the pool, a verdict
OUTSIDE_TARGETS = {
    "awm_serve_within_2ms_of_pool": lambda o: o["awm_serve"]["within_2ms_of_pool"],
    "verify_ms_p50_le_30": lambda o: o["verification"]["verify_ms_p50"] <= 30,
}


def _outside(pool: Any, store: Any, scripts: dict[str, Any], scenarios: list[str], *, serve_calls: int,
             verdict_count: int, fresh_verdicts: int, call_timeout_s: float) -> dict[str, Any]:
    """`awm serve` against the pool on the first measured scenario, and verdicts on fresh episodes; a part that
    fails says so under its own key (`error`) instead of ending the benchmark."""
    from benchmarks import outside

    out: dict[str, Any] = {}
    first = scenarios[0]
    try:
        out["awm_serve"] = outside.serve_vs_pool(pool, store.root, first, scripts[first]["reads"][0],
                                                 calls=serve_calls, call_timeout_s=call_timeout_s)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON; the pool's figures stand on their own
        out["awm_serve"] = {"scenario": first, "error": _short(exc, 500)}
    try:
        out["verification"] = outside.verdicts(pool, store, {s: scripts[s] for s in scenarios},
                                               count=verdict_count, fresh=fresh_verdicts)
    except Exception as exc:  # noqa: BLE001 - as above
        out["verification"] = {"error": _short(exc, 500)}
    return out


def _openenv(pool: Any, scripts: dict[str, Any], scenarios: list[str], *, url: str, scenario: str | None,
             task_idx: int | None, calls: int, sessions: int, pid: int | None) -> dict[str, Any]:
    """The OpenEnv-protocol server at `url` against the pool on `scenario` (default: the first measured one), with
    the workload's first read call; a failure says so under `error` (the pool's figures stand on their own)."""
    from benchmarks import outside

    scenario = scenario or scenarios[0]
    try:
        script = scripts.get(scenario) or discover_script(pool, scenario)
        if not script["reads"]:
            raise ValueError(f"no read tool of {scenario} answers from its initial state: {script['errors']}")
        return outside.openenv_vs_pool(pool, url, scenario, script["reads"][0], task_idx=task_idx, calls=calls,
                                       sessions=sessions, pid=pid)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON
        return {"url": url, "scenario": scenario, "error": _short(exc, 500)}


def run_openenv_only(store_root: Path, scenarios: list[str] | None, *, num_hosts: int | None, call_timeout_s: float,
                     openenv: dict[str, Any]) -> dict[str, Any]:
    """`--openenv-only`: the pool started for the OpenEnv comparison alone (no other measurement)."""
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(store_root)
    wanted = [openenv["scenario"]] if openenv.get("scenario") else scenarios
    requested, _ = _pick_scenarios(store, wanted)
    t0, load_before = time.time(), os.getloadavg()
    pool, meta = open_pool(store.root, instances=openenv["sessions"] + 8, num_hosts=num_hosts,
                           call_timeout_s=call_timeout_s)
    try:
        report = _openenv(pool, {}, requested, **openenv)
    finally:
        pool.close()
    return {"openenv_baseline": report, "pool": meta,
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                        "loadavg_1m_start": round(load_before[0], 2), "loadavg_1m_end": round(os.getloadavg()[0], 2)},
            "elapsed_s": round(time.time() - t0, 1)}


def _pick_scenarios(store: Any, scenarios: list[str] | None) -> tuple[list[str], list[str]]:
    """(the scenarios to run, the store's scenarios without environment code); unknown names are an error."""
    def runnable(s: str) -> bool:
        return (store.scenario_dir(s) / "server.py").is_file() and (store.scenario_dir(s) / "initial.db").is_file()

    listed = store.list_scenarios()
    available = [s for s in listed if runnable(s)]
    if scenarios:
        unknown = [s for s in scenarios if s not in available]
        if unknown:
            raise ValueError(f"unknown scenario(s) {unknown}: scenarios with environment code in {store.root}: "
                             f"{', '.join(available) or 'none'}")
        return list(dict.fromkeys(scenarios)), []
    if not available:
        raise ValueError(f"no scenario with environment code in {store.root}")
    return available, [s for s in listed if s not in available]


def _measure(pool: Any, started: dict[str, Any], store_root: Path, *, latency_calls: int, kw_ours: dict[str, Any],
             kw_base: dict[str, Any], failures: tuple[Failures, Failures]) -> tuple[dict, dict, list[str], dict]:
    """Both sides' one-scenario-at-a-time phases first (a scenario failing there is just left out), then
    their all-at-once phases on the scenarios still standing, again on each side that ran them with a
    scenario that has failed since. (ours, baseline, measured scenarios, all-at-once runs per side)."""
    ours_f, base_f = failures
    scripts = started["scripts"]

    def live() -> list[str]:
        now = [s for s in scripts if s not in ours_f and s not in base_f]
        if not now:
            left = [*ours_f.entries.values(), *base_f.entries.values()]
            raise ValueError("no scenario can be benchmarked: " +
                             "; ".join(f"{e['scenario']} ({e['side']}, {e['phase']}): {e['what']}" for e in left))
        return now

    live()
    baseline = Baseline(store_root, scripts, failures=base_f, **kw_base)
    try:
        baseline.each()
        each = ours_each(pool, {s: scripts[s] for s in live()}, started["home"], failures=ours_f,
                         latency_calls=latency_calls)
        ran: dict[str, list[str] | None] = {"baseline": None, "ours": None}  # the scenarios each side last ran with
        everything: dict[str, Any] = {}  # each side's latest all-at-once result
        runs = {"baseline": 0, "ours": 0}
        while True:
            now = live()
            side = next((k for k in ("baseline", "ours") if ran[k] != now), None)
            if side is None:
                return (summarize_ours(each, everything["ours"], started, now, ours_f),
                        baseline.summary(everything["baseline"], now), now, runs)
            runs[side] += 1
            ran[side] = now
            everything[side] = (baseline.all(now) if side == "baseline" else
                                ours_all(pool, {s: scripts[s] for s in now}, failures=ours_f, **kw_ours))
    finally:
        baseline.close()


def run_benchmark(store_root: Path, scenarios: list[str] | None = None, *, instances: int = 4096,
                  baseline_instances: int = 8, workload_instances: int = 1024, latency_calls: int = 600,
                  isolation_instances: int = 1024, num_hosts: int | None = None,
                  call_timeout_s: float = CALL_TIMEOUT_S, serve_calls: int = 200, verdict_count: int = 60,
                  fresh_verdicts: int = 8, openenv: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run both sides on the same scenarios; returns the report (see module docstring). Raises ValueError
    when no scenario can be measured (each one's failure named). `openenv`: the options of `_openenv`."""
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(store_root)
    requested, without_code = _pick_scenarios(store, scenarios)
    t0 = time.time()
    load_before = os.getloadavg()
    failures = (Failures("ours"), Failures("baseline"))
    pool, meta = open_pool(store.root, instances=instances, num_hosts=num_hosts, call_timeout_s=call_timeout_s)
    try:
        started = start_ours(pool, requested, failures[0])
        # the baseline replays the workload ours discovered (same tools, same arguments)
        ours, baseline, scenarios, runs = _measure(
            pool, started, store.root, failures=failures, latency_calls=latency_calls,
            kw_ours=dict(instances=instances, workload_instances=min(workload_instances, instances),
                         isolation_instances=min(isolation_instances, instances)),
            kw_base=dict(instances=baseline_instances, extrapolate_to=instances, call_timeout_s=call_timeout_s,
                         latency_calls=max(50, latency_calls // 3)))
        outside = _outside(pool, store, started["scripts"], scenarios, serve_calls=serve_calls,
                           verdict_count=verdict_count, fresh_verdicts=fresh_verdicts, call_timeout_s=call_timeout_s)
        if openenv is not None:
            outside["openenv_baseline"] = _openenv(pool, started["scripts"], scenarios, **openenv)
    finally:
        pool.close()
    ours = {**meta, **ours, "skipped": started["skipped"]}
    ratios = {}
    for key in ("cold_start_ms", "create_ms_p50", "reset_ms_p50", "call_ms_p50", "call_ms_p99",
                "throughput_calls_per_s", "mb_per_instance"):
        if ours.get(key) is not None and baseline.get(key):
            ratios[key] = round(ours[key] / baseline[key], 5)
    ratios["host_call_ms_p50_vs_baseline_call_ms_p50"] = (
        round(ours["host_call_ms_p50"] / baseline["call_ms_p50"], 5) if baseline.get("call_ms_p50") else None)
    targets = {}
    for name, check in TARGETS.items():
        try:
            targets[name] = bool(check(ours))
        except (KeyError, TypeError):
            targets[name] = False
    for name, check in OUTSIDE_TARGETS.items():
        try:
            targets[name] = bool(check(outside))
        except (KeyError, TypeError):
            targets[name] = False
    order = {s: i for i, s in enumerate(requested)}
    left_out = sorted([*failures[0].entries.values(), *failures[1].entries.values()],
                      key=lambda e: order[e["scenario"]])
    return {"ours": ours, "baseline": baseline, "ratios": ratios, "targets": targets,
            "os_isolation": ours.get("os_isolation"), "seccomp": ours.get("seccomp"), "limits": ours.get("limits"),
            "awm_serve": outside["awm_serve"], "verification": outside["verification"],
            **({"openenv_baseline": outside["openenv_baseline"]} if openenv is not None else {}),
            "all_targets_met": all(targets.values()), "scenarios": scenarios, "left_out": left_out,
            "skipped": started["skipped"], "without_env_code": without_code, "runs": runs,
            "call_timeout_s": call_timeout_s,
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                        # other work on the machine slows both sides; the 1-minute load average says how much
                        "loadavg_1m_start": round(load_before[0], 2), "loadavg_1m_end": round(os.getloadavg()[0], 2)},
            "elapsed_s": round(time.time() - t0, 1),
            "notes": ["ratios are ours / baseline (below 1 is better, except throughput)",
                      "ours: call_ms_* is a client call through a Ray actor; host_call_ms_* is inside the host",
                      "ours: total_mb = resident sets of the host actors plus Ray's own processes; the instance "
                      "databases live in the hosts' memory, so db_mb_total is part of it",
                      "left_out: scenarios measured on neither side (the first failure of each); a side whose "
                      "all-at-once phases ran with a scenario that failed since was measured again (runs)",
                      baseline.get("note", "")]}


def _print_text(report: dict[str, Any]) -> None:
    o, b, r = report["ours"], report["baseline"], report["ratios"]
    print(f"scenarios: {', '.join(report['scenarios'])}")
    for e in report["left_out"]:
        print(f"  left out {e['scenario']} ({e['side']}, {e['phase']}): {e['what']}")
    for key in ("cold_start_ms", "create_ms_p50", "reset_ms_p50", "call_ms_p50", "call_ms_p99",
                "throughput_calls_per_s", "mb_per_instance"):
        print(f"  {key:24s} ours {o.get(key)!s:>10}  baseline {b.get(key)!s:>10}  ratio {r.get(key)}")
    print(f"  host_call_ms_p50 {o.get('host_call_ms_p50')} (batched in the host: {o.get('host_batch_call_ms_p50')} ms, "
          f"{o.get('host_batch_call_cpu_ms_p50')} ms CPU)  total_mb {o.get('total_mb')} for {o['instances']} instances")
    print(f"  os isolation of the hosts: {o.get('os_isolation')}, {o.get('seccomp')} "
          f"(pipe {o.get('host_pipe_ms_p50')} ms per batch)")
    limits = report.get("limits") or {}
    print(f"  limits: answers up to {limits.get('max_answer_bytes')} bytes, requests up to "
          f"{limits.get('max_request_bytes')} bytes, {limits.get('scratch')}")
    served = report.get("awm_serve") or {}
    if "error" in served:
        print(f"  awm serve: {served['error']}")
    elif served:
        for side in ("pool", "fastmcp", "mcp"):
            print(f"  awm serve {served['scenario']} {side:8s} call p50 {served[side]['call_ms_p50']} ms "
                  f"(p99 {served[side]['call_ms_p99']}), reset p50 {served[side]['reset_ms_p50']} ms "
                  f"(p99 {served[side]['reset_ms_p99']})")
    _print_openenv(report.get("openenv_baseline"))
    verdict = report.get("verification") or {}
    if "verify_ms_p50" in verdict:
        print(f"  verification ({verdict['scenario']}): p50 {verdict['verify_ms_p50']} ms, p99 "
              f"{verdict['verify_ms_p99']} ms warm; a fresh sandbox per verdict p50 {verdict['fresh_sandbox_ms_p50']} ms")
    elif verdict:
        print(f"  verification: {verdict.get('error') or verdict.get('skipped')}")
    print("targets: " + ", ".join(f"{k}={'met' if v else 'MISSED'}" for k, v in report["targets"].items()))


def _print_openenv(o: dict[str, Any] | None) -> None:
    if not o:
        return
    if "error" in o:
        print(f"  OpenEnv server {o['url']}: {o['error']}")
        return
    for side in ("pool", "openenv"):
        print(f"  {side} ({o['scenario']}) reset p50 {o[side]['reset_ms_p50']} ms (p99 {o[side]['reset_ms_p99']}), "
              f"call {o['tool']} p50 {o[side]['call_ms_p50']} ms (p99 {o[side]['call_ms_p99']})")
    print(f"  {o['sessions']} at once: OpenEnv server {o['open_sessions_wall_s']} s ({o['sessions_opened']} opened), "
          f"pool {o['pool_open_instances_wall_s']} s; per extra session {o.get('mb_per_extra_session')} MB "
          f"(server at {o['url']})")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="awm bench serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--scenarios", nargs="+", default=None, help="scenario keys (default: every one with env code)")
    parser.add_argument("--instances", type=int, default=4096, help="our concurrent instances (default 4096)")
    parser.add_argument("--baseline-instances", type=int, default=8,
                        help="baseline server processes (default 8, at least one per scenario; memory is extrapolated)")
    parser.add_argument("--workload-instances", type=int, default=1024, help="instances in the throughput run")
    parser.add_argument("--hosts", type=int, default=None, help="host actors (default: CPU count, at most 4)")
    parser.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT_S,
                        help=f"seconds a call may take on either side before its scenario is left out "
                             f"(default {CALL_TIMEOUT_S:g})")
    parser.add_argument("--home", type=Path, default=None, help="artifact store root (default $AWM_HOME)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    parser.add_argument("--serve-calls", type=int, default=200,
                        help="rounds of a call and a reset through `awm serve` (both clients) and the pool (default 200)")
    parser.add_argument("--verdicts", type=int, default=60,
                        help="verdicts on fresh episodes through the warm sandboxes (default 60; 8 more in a fresh "
                             "sandbox each)")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (for tests): 64 instances")
    oe = parser.add_argument_group("an OpenEnv-protocol server as a baseline (OpenEnv's AWM server, or awm serve --openenv)")
    oe.add_argument("--openenv-url", default=None, help="its address (http://HOST:PORT; the bench drives its /ws)")
    oe.add_argument("--openenv-scenario", default=None, help="the scenario reset on both sides (default: the first measured)")
    oe.add_argument("--openenv-task", type=int, default=None, help="the task index its reset asks for (default: the server's pick)")
    oe.add_argument("--openenv-pid", type=int, default=None,
                    help="its process on this machine: memory per extra session (RSS of its process tree)")
    oe.add_argument("--openenv-sessions", type=int, default=64, help="sessions opened at once (default 64)")
    oe.add_argument("--openenv-calls", type=int, default=100, help="timed rounds of a reset and a read call (default 100)")
    oe.add_argument("--openenv-only", action="store_true", help="measure only the OpenEnv server against the pool")
    args = parser.parse_args(argv)
    if args.call_timeout <= 0:
        parser.error(f"--call-timeout must be positive, got {args.call_timeout:g}")
    openenv = None
    if args.openenv_url:
        from benchmarks import outside

        if args.openenv_sessions < 1 or args.openenv_calls < 1:
            parser.error("--openenv-sessions and --openenv-calls must be at least 1")
        try:  # a server that is not there is one clear error before anything is started
            outside.openenv_health(args.openenv_url)
            if args.openenv_pid:
                outside.rss_tree_mb(args.openenv_pid)
        except ValueError as exc:
            print(f"awm bench serve: {exc}", file=sys.stderr)
            return 2
        openenv = dict(url=args.openenv_url, scenario=args.openenv_scenario, task_idx=args.openenv_task,
                       calls=args.openenv_calls, sessions=args.openenv_sessions, pid=args.openenv_pid)
    elif args.openenv_only or args.openenv_pid or args.openenv_scenario or args.openenv_task is not None:
        parser.error("the --openenv-* options need --openenv-url")
    from awm_resources.store import ArtifactStore

    kw: dict[str, Any] = dict(instances=args.instances, baseline_instances=args.baseline_instances,
                              workload_instances=args.workload_instances, num_hosts=args.hosts,
                              call_timeout_s=args.call_timeout, serve_calls=args.serve_calls,
                              verdict_count=args.verdicts)
    if args.serve_calls < 1 or args.verdicts < 2:
        parser.error("--serve-calls must be at least 1 and --verdicts at least 2")
    if args.quick:
        kw.update(instances=min(args.instances, 64), baseline_instances=min(args.baseline_instances, 2),
                  workload_instances=min(args.workload_instances, 32), latency_calls=60, isolation_instances=32,
                  serve_calls=min(args.serve_calls, 30), verdict_count=min(args.verdicts, 12), fresh_verdicts=3)
    try:
        if openenv is not None and args.openenv_only:
            report = run_openenv_only(ArtifactStore(args.home).root, args.scenarios, num_hosts=args.hosts,
                                      call_timeout_s=args.call_timeout, openenv=openenv)
        else:
            report = run_benchmark(ArtifactStore(args.home).root, args.scenarios, openenv=openenv, **kw)
    except ValueError as exc:
        print(f"awm bench serve: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    elif "ours" in report:
        _print_text(report)
    else:
        _print_openenv(report["openenv_baseline"])
    return 1 if "error" in (report.get("openenv_baseline") or {}) and args.openenv_only else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
