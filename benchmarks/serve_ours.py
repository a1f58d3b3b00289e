"""Our side of `awm bench serve`: the `EnvironmentPool` measured through its public API.

The pool is opened and each scenario imported (cold start) and its workload discovered; then the phases that visit
one scenario at a time (create, reset and calls timed inside the host, calls and resets through Ray) and those with
every instance at once (one marked write each, memory, isolation, throughput), summarized over the scenarios that
both sides measured. The runtime is imported inside the functions: the benchmark loads it only when it runs.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import memory_by_process, ray_node_processes, rss_mb, with_descendants
from benchmarks.serve_workload import (
    MARK,
    Failures,
    discover_script,
    instance_script,
    p50,
    percentile,
    short_error,
    text_markers,
)


def _ours_fault(tool: str, r: Any) -> str | None:
    """What went wrong with one of our calls, or None if it was answered (a 4xx is the caller's error)."""
    if r.ok or r.error_kind == "agent":
        return None
    if r.detail:
        return f"tool {tool} answered HTTP {r.status} ({short_error(r.detail, 200)})"
    return f"tool {tool} failed: {short_error(r.text)}"


def _timed_fault(tool: str, t: Any) -> str | None:
    """`_ours_fault` for a `TimedResult` (a failed operation carries an `OpError` with its message)."""
    if hasattr(t.result, "error_kind"):
        return _ours_fault(tool, t.result)
    return None if t.ok else short_error(getattr(t.result, "message", t.result))


def _digest(db_path: Path) -> list:
    """The content digest of a database file (the isolation check compares one after reset with the initial one)."""
    from awm_rl.runtime.db import database_digest

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return database_digest(conn)
    finally:
        conn.close()


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
            failures.fail(s, "start", short_error(exc), counted=False)
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
            failures.fail(s, "discovery", short_error(exc), counted=False)
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
                failures.fail(s, "latency", f"no instance: {short_error(exc)}")
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
                failures.fail(s, "latency", f"reset through the pool failed: {short_error(exc)}")
                continue
            samples[s]["pool_reset"].append((time.perf_counter() - t) * 1000)
    finally:
        for h in handles.values():
            pool.release(h)


def _ours_memory(pool: Any, scenarios: list[str], instances: int, out: dict[str, Any]) -> None:
    """Resident sets of the host actors, their workers (those of measured scenarios) and Ray's processes."""
    stats = pool.host_stats()
    host_pids = with_descendants([st["pid"] for st in stats if "pid" in st])  # actors and their workers
    ray_procs = ray_node_processes()
    system_pids = [p for p in ray_procs if p not in host_pids]
    actors = {st["pid"] for st in stats if "pid" in st}
    host_rows = [r for r in memory_by_process({p: "host actor" if p in actors else "sandboxed" for p in host_pids})
                 if r.get("scenario") in (None, *scenarios)]  # a left-out scenario's worker is not counted
    by_process = host_rows + memory_by_process({p: f"ray {ray_procs[p]}" for p in system_pids})
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
            failures.fail(s, "isolation", f"could not create {k} instances: {short_error(exc)}")
    out["acquire_all_s"] = round(time.perf_counter() - t, 2)
    out["acquire_ms_mean"] = round((time.perf_counter() - t) * 1000 / max(1, instances), 4)

    def first_call(s: str, j: int) -> tuple[str, dict[str, Any]]:
        script = instance_script(scripts[s], j)
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
            for tool, args in instance_script(scripts[s], j + 100000):
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
            failures.fail(s, "reset", f"{type(exc).__name__}: {short_error(exc)}")
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
            "create_ms_p50": p50(pooled("creates")), "reset_ms_p50": p50(pooled("resets")),
            "host_batch_call_ms_p50": p50(pooled("host_wall")), "host_batch_call_cpu_ms_p50": p50(pooled("host_cpu")),
            "call_ms_p50": p50(lat), "call_ms_p99": percentile(lat, 0.99),
            "host_call_ms_p50": p50(host_lat), "host_call_ms_p99": percentile(host_lat, 0.99),
            "pool_reset_ms_p50": p50(pooled("pool_reset")),
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
            failures.fail(s, "isolation", f"snapshot failed: {short_error(snap)}")
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
        markers = text_markers(snap[1]) - {f"{MARK}-probe", f"{MARK}-probe2"}
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
