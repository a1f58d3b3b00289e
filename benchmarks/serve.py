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
- reset_ms_p50: ours inside the host (and through Ray as pool_reset_ms_p50); baseline SQL rebuild.
- call_ms_p50/p99: one call at a time from the client (ours through Ray; host_call_ms_* inside it).
- throughput_calls_per_s: every workload instance runs its script concurrently.
- memory: resident set of every process involved (ours: host actors, their sandboxed scenario workers
  and Ray's own processes; baseline: the server processes) plus database copies not already in a
  resident set (baseline files); the baseline runs fewer instances and is extrapolated per instance,
  as the JSON says. `total_mb` (the target) sums resident sets, which counts pages shared between
  processes once per process; `pss_mb_total` splits them (what the processes use together), and
  `memory_by_process` lists rss/pss/uss per process. Instances beyond a worker's open budget are parked
  (`parked_databases`: their image only), so `db_mb_total` counts open and parked databases.
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

MARK = "awmiso"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


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
    """Read and write calls of `scenario` that succeed from the initial state (through the pool)."""
    from awm_rl.runtime.tools import example_arguments, looks_read_only

    h = pool.acquire(scenario)
    try:
        tools = pool.list_tools(h)
        reads, writes = [], []
        for tool in tools:
            args = example_arguments(tool["input_schema"])
            if args is None:
                continue
            is_read = looks_read_only(tool["name"])
            field = None if is_read else _marker_field(tool, args)
            if field:
                args = {**args, field: f"{MARK}-probe"}
            pool.reset(h)
            r = pool.call_tool(h, tool["name"], args)
            if not r.ok:
                continue
            if is_read:
                reads.append({"tool": tool["name"], "args": args})
            elif field:
                _, final = pool.snapshot(h)
                if f"{MARK}-probe" in _text_markers(final):
                    writes.append({"tool": tool["name"], "args": args, "field": field})
        pool.reset(h)
    finally:
        pool.release(h)
    return {"scenario": scenario, "reads": reads, "writes": writes, "tools": len(tools)}


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
    except Exception:  # noqa: BLE001
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


def _rss_mb(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def _memory_by_process(roles: dict[int, str]) -> list[dict[str, Any]]:
    """rss / pss / uss (MB) per process with its role. PSS splits each shared page among the processes
    that map it, so PSS totals add up to the memory actually used; RSS totals count shared pages (the
    interpreter, libraries) once per process."""
    import psutil

    rows = []
    for pid, role in roles.items():
        try:
            proc = psutil.Process(pid)
            full = proc.memory_full_info()
            args = proc.cmdline()
        except psutil.Error:
            continue
        if role == "sandboxed":  # bubblewrap, its PID-1 helper, or the scenario worker it runs
            worker = "awm_rl.runtime.actor" in args
            role = (f"scenario worker {args[-1]}" if worker and os.path.basename(args[0]).startswith("python")
                    else "bubblewrap" + (f" ({args[-1]})" if worker else ""))
        rows.append({"pid": pid, "role": role, "rss_mb": round(full.rss / 2**20, 1),
                     "pss_mb": round(full.pss / 2**20, 1), "uss_mb": round(full.uss / 2**20, 1)})
    return rows


# ---------------------------------------------------------------------------------------------
# ours
def bench_ours(store_root: Path, scenarios: list[str], *, instances: int, workload_instances: int,
               latency_calls: int, num_hosts: int | None,
               isolation_instances: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Our side; returns (report, the discovered workload scripts)."""
    from awm_rl.runtime.pool import CallOp, CreateOp, EnvironmentPool, OpenOp, ReleaseOp, ResetOp

    out: dict[str, Any] = {"instances": instances, "scenarios": scenarios}
    t0 = time.perf_counter()
    pool = EnvironmentPool(store_root, num_hosts=num_hosts, max_instances=instances + 64, prefetch=4)
    out["pool_start_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["hosts"] = pool.num_hosts
    # OS isolation of the host workers ("bubblewrap": generated code runs in a sandboxed worker behind
    # a pipe from each host actor; "none: <reason>": in the actor under Python-level guards only)
    stats = pool.host_stats()
    out["os_isolation"] = sorted({str(st.get("isolation")) for st in stats})[0]
    out["seccomp"] = sorted({str(st.get("seccomp")) for st in stats})[0]  # applied by each scenario worker
    try:
        # cold start: the first acquire of each scenario imports it on one host
        cold, cold_cpu, home = {}, {}, {}
        for s in scenarios:
            h = pool.acquire(s)
            home[s] = h.host  # host-level timings run there (a scenario's worker lives on its home hosts)
            cold[s] = round(pool.cold_start_ms(s), 1)
            cold_cpu[s] = round(pool.cold_start_ms(s, cpu=True), 1)
            pool.release(h)

        # every measurement calls a read tool of each scenario: one without any is left out
        discovered = {s: discover_script(pool, s) for s in scenarios}
        out["skipped"] = [{"scenario": s, "reason": f"no read-only tool among its {v['tools']} tool(s) answers "
                                                     "a call built from its schema examples"}
                          for s, v in discovered.items() if not v["reads"]]
        scripts = {s: v for s, v in discovered.items() if v["reads"]}
        if not scripts:
            raise ValueError("no scenario can be benchmarked: " +
                             "; ".join(f"{x['scenario']}: {x['reason']}" for x in out["skipped"]))
        scenarios = out["scenarios"] = list(scripts)
        out["cold_start_ms_by_scenario"] = cold = {s: cold[s] for s in scenarios}
        out["cold_start_cpu_ms_by_scenario"] = {s: cold_cpu[s] for s in scenarios}
        out["cold_start_ms"] = round(statistics.median(cold.values()), 1)
        out["cold_start_ms_max"] = max(cold.values())
        out["workload"] = {s: {"reads": [r["tool"] for r in v["reads"]], "writes": [w["tool"] for w in v["writes"]]}
                           for s, v in scripts.items()}

        # host-level create / reset (timed inside the host actor)
        creates, resets, host_wall, host_cpu = [], [], [], []
        for s in scenarios:
            ids = pool.run_timed(home[s], [CreateOp(s, 1)])[0].result
            for _ in range(20):
                created = pool.run_timed(home[s], [CreateOp(s, 1)])[0]
                iid = created.result[0]
                opened = pool.run_timed(home[s], [OpenOp(iid)])[0]
                creates.append(created.wall_ms + opened.wall_ms)
                w = scripts[s]["writes"][0] if scripts[s]["writes"] else None
                ops = [CallOp(iid, w["tool"], {**w["args"], w["field"]: f"{MARK}-r"})] if w else []
                timed = pool.run_timed(home[s], ops + [ResetOp(iid), ReleaseOp(iid)])
                resets.append(timed[-2].wall_ms)
            # read calls inside the host, wall clock and CPU time (the CPU time is what the call costs
            # when nothing else competes for the cores)
            reads = [CallOp(ids[0], r["tool"], r["args"]) for r in scripts[s]["reads"]] * 10
            for timed_read in pool.run_timed(home[s], reads):
                host_wall.append(timed_read.wall_ms)
                host_cpu.append(timed_read.cpu_ms)
            pool.run_timed(home[s], [ReleaseOp(ids[0])])
        out["create_ms_p50"] = _p50(creates)
        out["reset_ms_p50"] = _p50(resets)
        out["host_batch_call_ms_p50"] = _p50(host_wall)
        out["host_batch_call_cpu_ms_p50"] = _p50(host_cpu)
        # the actor <-> isolated worker pipe, per batch (not part of the per-operation times above)
        out["host_pipe_ms_p50"] = pool.host_stats()[0].get("pipe_ms_p50")

        # latency: one call at a time through the pool
        handles = {s: pool.acquire(s) for s in scenarios}
        lat, host_lat = [], []
        reads_only = [(s, (r["tool"], r["args"])) for s in scenarios for r in scripts[s]["reads"]]
        for i in range(latency_calls):
            s, (tool, args) = reads_only[i % len(reads_only)]
            t = time.perf_counter()
            r = pool.call_tool(handles[s], tool, args)
            lat.append((time.perf_counter() - t) * 1000)
            host_lat.append(r.elapsed_ms)
        out["call_ms_p50"], out["call_ms_p99"] = _p50(lat), _pct(lat, 0.99)
        out["host_call_ms_p50"], out["host_call_ms_p99"] = _p50(host_lat), _pct(host_lat, 0.99)
        pr = []
        for i in range(min(200, latency_calls)):
            h = handles[scenarios[i % len(scenarios)]]
            t = time.perf_counter()
            pool.reset(h)
            pr.append((time.perf_counter() - t) * 1000)
        out["pool_reset_ms_p50"] = _p50(pr)
        for h in handles.values():
            pool.release(h)

        # all instances: acquire, each makes its marked write (its own database), memory
        per = [instances // len(scenarios) + (1 if i < instances % len(scenarios) else 0) for i in range(len(scenarios))]
        t = time.perf_counter()
        all_handles: list[tuple[str, int, Any]] = []
        for s, k in zip(scenarios, per):
            for j, h in enumerate(pool.acquire_many(s, k)):
                all_handles.append((s, j, h))
        out["acquire_all_s"] = round(time.perf_counter() - t, 2)
        out["acquire_ms_mean"] = round((time.perf_counter() - t) * 1000 / max(1, instances), 4)

        async def first_write() -> list:
            calls = []
            for s, j, h in all_handles:
                script = _script(scripts[s], j)
                calls.append(pool.call_tool_async(h, *(script[1] if len(script) > 3 else script[0])))
            return await asyncio.gather(*calls)
        t = time.perf_counter()
        first = asyncio.run(first_write())
        out["materialize_all_s"] = round(time.perf_counter() - t, 2)
        out["first_write_ok"] = sum(1 for r in first if r.ok)

        stats = pool.host_stats()
        host_pids = _with_descendants([st["pid"] for st in stats if "pid" in st])  # actors and their workers
        ray_procs = _ray_processes()
        system_pids = [p for p in ray_procs if p not in host_pids]
        out["rss_mb_hosts"] = round(_rss_mb(host_pids), 1)
        out["rss_mb_ray_system"] = round(_rss_mb(system_pids), 1)
        out["rss_mb_driver"] = round(_rss_mb([os.getpid()]), 1)
        out["rss_mb_total"] = round(out["rss_mb_hosts"] + out["rss_mb_ray_system"], 1)
        actors = {st["pid"] for st in stats if "pid" in st}
        by_process = _memory_by_process({**{p: "host actor" if p in actors else "sandboxed" for p in host_pids},
                                         **{p: f"ray {ray_procs[p]}" for p in system_pids}})
        out["pss_mb_total"] = round(sum(r["pss_mb"] for r in by_process), 1)
        out["memory_by_process"] = by_process
        live_dbs = sum(v["live_dbs"] for st in stats for v in st.get("scenarios", {}).values())
        out["live_databases"] = live_dbs
        out["parked_databases"] = sum(v.get("parked_dbs", 0) for st in stats for v in st.get("scenarios", {}).values())
        out["db_mb_total"] = round(sum((v["live_dbs"] * v["template_kb"] + v.get("parked_kb", 0)) / 1024
                                       for st in stats for v in st.get("scenarios", {}).values()), 1)
        out["db_in_rss"] = True
        out["total_mb"] = out["rss_mb_total"]
        out["mb_per_instance"] = round(out["total_mb"] / instances, 4)
        out["mb_per_instance_hosts_only"] = round(out["rss_mb_hosts"] / instances, 4)

        # isolation: each instance made exactly one marked write so far
        wrote = {id(h): (r.ok and bool(scripts[s]["writes"])) for (s, _j, h), r in zip(all_handles, first)}
        out["isolation"] = _isolation(pool, _spread(all_handles, isolation_instances), wrote)

        # throughput: `workload_instances` instances (spread over scenarios) run their scripts concurrently
        picked = _spread(all_handles, workload_instances)

        async def workload() -> tuple[int, int, float]:
            async def run(s: str, j: int, h: Any) -> tuple[int, int]:
                ok = n = 0
                for tool, args in _script(scripts[s], j + 100000):
                    r = await pool.call_tool_async(h, tool, args)
                    n += 1
                    ok += r.ok
                return n, ok
            t0 = time.perf_counter()
            res = await asyncio.gather(*(run(s, j, h) for s, j, h in picked))
            return sum(r[0] for r in res), sum(r[1] for r in res), time.perf_counter() - t0
        n, ok, dt = asyncio.run(workload())
        out["workload_instances"] = len(picked)
        out["workload_calls"] = n
        out["workload_ok_calls"] = ok
        out["throughput_calls_per_s"] = round(n / dt, 1)

    finally:
        pool.close()
    return out, scripts


def _spread(items: list, n: int) -> list:
    """n items taken evenly across the list (so every scenario is represented)."""
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _isolation(pool: Any, handles: list[tuple[str, int, Any]], wrote: dict[int, bool]) -> dict[str, Any]:
    """Each instance holds only its own marker (if its marked write succeeded, else none); after reset
    each equals the initial database."""
    async def snap_all() -> list:
        return await asyncio.gather(*(pool.snapshot_async(h) for _, _, h in handles))

    snaps = asyncio.run(snap_all())
    own_only = writers = 0
    problems: list[str] = []
    for (s, j, h), (_initial, final) in zip(handles, snaps):
        expected = {f"{MARK}-{j}"} if wrote.get(id(h)) else set()
        writers += bool(expected)
        markers = _text_markers(final) - {f"{MARK}-probe"}
        if markers == expected:
            own_only += 1
        elif len(problems) < 5:
            problems.append(f"{h.instance_id}: expected {sorted(expected)}, found {sorted(markers)[:5]}")

    async def reset_all() -> None:
        await asyncio.gather(*(pool.reset_async(h) for _, _, h in handles))
    asyncio.run(reset_all())
    snaps = asyncio.run(snap_all())
    initial_digest: dict[str, list] = {}
    equal = 0
    for (s, _j, h), (initial, final) in zip(handles, snaps):
        if s not in initial_digest:
            initial_digest[s] = _digest(initial)
        if _digest(final) == initial_digest[s]:
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


def bench_baseline(store_root: Path, scenarios: list[str], scripts: dict[str, Any], *, instances: int,
                   extrapolate_to: int, latency_calls: int) -> dict[str, Any]:
    import httpx
    import psutil

    from awm_rl.runtime.tools import tool_routes_from_openapi, to_request

    work = Path(tempfile.mkdtemp(prefix="awm-bench-baseline-"))
    procs: list[dict[str, Any]] = []
    out: dict[str, Any] = {"instances": instances, "extrapolated_to": extrapolate_to,
                           "method": "one `python server.py` (uvicorn) process per instance on its own SQLite "
                                     "file; tool calls as plain HTTP requests (cheaper than the published MCP "
                                     "over HTTP); reset = rebuild the database from schema.sql + sample.sql"}

    def limit() -> None:  # generated code: cap the server's address space
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, resource.RLIM_INFINITY))
        os.setsid()

    try:
        creates, cold = [], {}
        for i in range(instances):
            s = scenarios[i % len(scenarios)]
            folder = store_root / "scenarios" / s
            t = time.perf_counter()
            db = work / f"{s}-{i}.db"
            shutil.copyfile(folder / "initial.db", db)
            port = _free_port()
            env = {**os.environ, "DATABASE_PATH": f"sqlite:///{db}", "PORT": str(port), "HOST": "127.0.0.1"}
            p = subprocess.Popen([sys.executable, str(folder / "server.py")], cwd=work, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit)
            client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
            deadline = time.monotonic() + 60
            doc = None
            while time.monotonic() < deadline:
                try:
                    resp = client.get("/openapi.json")
                    if resp.status_code == 200:
                        doc = resp.json()
                        break
                except httpx.TransportError:
                    pass
                if p.poll() is not None:
                    break
                time.sleep(0.005)
            ms = (time.perf_counter() - t) * 1000
            if doc is None:
                p.kill()  # not yet in `procs`: stop it here so that it does not outlive the benchmark
                p.wait(timeout=10)
                client.close()
                raise RuntimeError(f"baseline server for {s} did not start (exit {p.poll()})")
            creates.append(ms)
            cold.setdefault(s, round(ms, 1))
            procs.append({"scenario": s, "i": i, "proc": p, "client": client, "db": db, "port": port,
                          "routes": tool_routes_from_openapi(doc)})
        out["cold_start_ms_by_scenario"] = cold
        out["cold_start_ms"] = round(statistics.median(cold.values()), 1)
        out["cold_start_ms_max"] = max(cold.values())
        out["create_ms_p50"] = _p50(creates)

        def call(inst: dict[str, Any], tool: str, args: dict[str, Any]) -> int:
            req = to_request(inst["routes"][tool], args)
            url = req.path + (("?" + req.query.decode()) if req.query else "")
            resp = inst["client"].request(req.method, url, content=req.body,
                                          headers={"content-type": "application/json"} if req.body else None)
            return resp.status_code

        # latency
        lat = []
        reads = [(inst, r) for inst in procs for r in scripts[inst["scenario"]]["reads"]]
        for i in range(latency_calls):
            inst, r = reads[i % len(reads)]
            t = time.perf_counter()
            call(inst, r["tool"], r["args"])
            lat.append((time.perf_counter() - t) * 1000)
        out["call_ms_p50"], out["call_ms_p99"] = _p50(lat), _pct(lat, 0.99)

        # reset (SQL rebuild in place)
        resets = []
        sql_cache: dict[str, tuple[list[str], list[str]]] = {}
        for inst in procs:
            s = inst["scenario"]
            if s not in sql_cache:
                folder = store_root / "scenarios" / s
                sql_cache[s] = (_sql_statements((folder / "schema.sql").read_text(encoding="utf-8")),
                                _sql_statements((folder / "sample.sql").read_text(encoding="utf-8"))
                                if (folder / "sample.sql").is_file() else [])
            for _ in range(3):
                t = time.perf_counter()
                _sql_rebuild(inst["db"], *sql_cache[s])
                resets.append((time.perf_counter() - t) * 1000)
        out["reset_ms_p50"] = _p50(resets)

        # throughput: every instance runs its script repeatedly, concurrently
        async def workload() -> tuple[int, float]:
            async def run(inst: dict[str, Any]) -> int:
                n = 0
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{inst['port']}", timeout=30) as ac:
                    for rep in range(25):
                        for tool, args in _script(scripts[inst["scenario"]], inst["i"] * 1000 + rep):
                            req = to_request(inst["routes"][tool], args)
                            url = req.path + (("?" + req.query.decode()) if req.query else "")
                            await ac.request(req.method, url, content=req.body,
                                             headers={"content-type": "application/json"} if req.body else None)
                            n += 1
                return n
            t0 = time.perf_counter()
            counts = await asyncio.gather(*(run(inst) for inst in procs))
            return sum(counts), time.perf_counter() - t0
        n, dt = asyncio.run(workload())
        out["workload_calls"] = n
        out["throughput_calls_per_s"] = round(n / dt, 1)

        rss = 0.0
        for inst in procs:
            try:
                proc = psutil.Process(inst["proc"].pid)
                rss += sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
            except psutil.Error:
                pass
        db_mb = sum(inst["db"].stat().st_size for inst in procs) / 2**20
        out["rss_mb_total"] = round(rss, 1)
        out["db_mb_total"] = round(db_mb, 2)
        out["total_mb"] = round(rss + db_mb, 1)
        out["mb_per_instance"] = round((rss + db_mb) / instances, 3)
        out["total_mb_extrapolated"] = round(out["mb_per_instance"] * extrapolate_to, 1)
        out["note"] = (f"measured on {instances} instances; memory extrapolated linearly to {extrapolate_to} "
                       "(each instance is an independent process)")
    finally:
        for inst in procs:
            inst["client"].close()
            try:
                os.killpg(inst["proc"].pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            inst["proc"].wait()
        shutil.rmtree(work, ignore_errors=True)
    return out


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


def run_benchmark(store_root: Path, scenarios: list[str] | None = None, *, instances: int = 4096,
                  baseline_instances: int = 8, workload_instances: int = 1024, latency_calls: int = 600,
                  isolation_instances: int = 1024, num_hosts: int | None = None) -> dict[str, Any]:
    """Run both sides on the same scenarios; returns the report (see module docstring)."""
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(store_root)
    available = [s for s in store.list_scenarios()
                 if (store.scenario_dir(s) / "server.py").is_file() and (store.scenario_dir(s) / "initial.db").is_file()]
    if scenarios:
        unknown = [s for s in scenarios if s not in available]
        if unknown:
            raise ValueError(f"unknown scenario(s) {unknown}: scenarios with environment code in {store.root}: "
                             f"{', '.join(available) or 'none'}")
    else:
        scenarios = available
    if not scenarios:
        raise ValueError(f"no scenario with environment code in {store.root}")
    t0 = time.time()
    load_before = os.getloadavg()
    ours, scripts = bench_ours(store.root, scenarios, instances=instances, workload_instances=min(workload_instances, instances),
                      latency_calls=latency_calls, num_hosts=num_hosts,
                      isolation_instances=min(isolation_instances, instances))
    # the baseline replays the workload ours discovered (same tools, same arguments)
    scenarios = list(scripts)
    baseline = bench_baseline(store.root, scenarios, scripts, instances=baseline_instances,
                              extrapolate_to=instances, latency_calls=max(50, latency_calls // 3))
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
    return {"ours": ours, "baseline": baseline, "ratios": ratios, "targets": targets,
            "os_isolation": ours.get("os_isolation"), "seccomp": ours.get("seccomp"),
            "all_targets_met": all(targets.values()), "scenarios": scenarios, "skipped": ours["skipped"],
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                        # other work on the machine slows both sides; the 1-minute load average says how much
                        "loadavg_1m_start": round(load_before[0], 2), "loadavg_1m_end": round(os.getloadavg()[0], 2)},
            "elapsed_s": round(time.time() - t0, 1),
            "notes": ["ratios are ours / baseline (below 1 is better, except throughput)",
                      "ours: call_ms_* is a client call through a Ray actor; host_call_ms_* is inside the host",
                      "ours: total_mb = resident sets of the host actors plus Ray's own processes; the instance "
                      "databases live in the hosts' memory, so db_mb_total is part of it",
                      baseline.get("note", "")]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="awm bench serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--scenarios", nargs="+", default=None, help="scenario keys (default: every one with env code)")
    parser.add_argument("--instances", type=int, default=4096, help="our concurrent instances (default 4096)")
    parser.add_argument("--baseline-instances", type=int, default=8,
                        help="baseline server processes (default 8; memory is extrapolated)")
    parser.add_argument("--workload-instances", type=int, default=1024, help="instances in the throughput run")
    parser.add_argument("--hosts", type=int, default=None, help="host actors (default: CPU count, at most 4)")
    parser.add_argument("--home", type=Path, default=None, help="artifact store root (default $AWM_HOME)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (for tests): 64 instances")
    args = parser.parse_args(argv)
    from awm_resources.store import ArtifactStore

    kw: dict[str, Any] = dict(instances=args.instances, baseline_instances=args.baseline_instances,
                              workload_instances=args.workload_instances, num_hosts=args.hosts)
    if args.quick:
        kw.update(instances=min(args.instances, 64), baseline_instances=min(args.baseline_instances, 2),
                  workload_instances=min(args.workload_instances, 32), latency_calls=60, isolation_instances=32)
    try:
        report = run_benchmark(ArtifactStore(args.home).root, args.scenarios, **kw)
    except ValueError as exc:
        print(f"awm bench serve: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    else:
        o, b, r = report["ours"], report["baseline"], report["ratios"]
        print(f"scenarios: {', '.join(report['scenarios'])}")
        for skipped in report["skipped"]:
            print(f"  skipped {skipped['scenario']}: {skipped['reason']}")
        for key in ("cold_start_ms", "create_ms_p50", "reset_ms_p50", "call_ms_p50", "call_ms_p99",
                    "throughput_calls_per_s", "mb_per_instance"):
            print(f"  {key:24s} ours {o.get(key)!s:>10}  baseline {b.get(key)!s:>10}  ratio {r.get(key)}")
        print(f"  host_call_ms_p50 {o.get('host_call_ms_p50')} (batched in the host: {o.get('host_batch_call_ms_p50')} ms, "
              f"{o.get('host_batch_call_cpu_ms_p50')} ms CPU)  total_mb {o.get('total_mb')} for {o['instances']} instances")
        print(f"  os isolation of the hosts: {o.get('os_isolation')}, {o.get('seccomp')} "
              f"(pipe {o.get('host_pipe_ms_p50')} ms per batch)")
        print("targets: " + ", ".join(f"{k}={'met' if v else 'MISSED'}" for k, v in report["targets"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
