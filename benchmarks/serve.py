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

Its parts: `benchmarks/serve_workload.py` (the scripted workload and the record of failures),
`benchmarks/serve_ours.py` (the pool's side), `benchmarks/serve_baseline.py` (the baseline's servers); this module
runs both on the same scenarios and writes the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.serve_baseline import Baseline
from benchmarks.serve_ours import open_pool, ours_all, ours_each, start_ours, summarize_ours
from benchmarks.serve_workload import Failures, discover_script, short_error

CALL_TIMEOUT_S = 10.0  # a call's deadline on both sides (`--call-timeout`)


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
        out["awm_serve"] = {"scenario": first, "error": short_error(exc, 500)}
    try:
        out["verification"] = outside.verdicts(pool, store, {s: scripts[s] for s in scenarios},
                                               count=verdict_count, fresh=fresh_verdicts)
    except Exception as exc:  # noqa: BLE001 - as above
        out["verification"] = {"error": short_error(exc, 500)}
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
        return {"url": url, "scenario": scenario, "error": short_error(exc, 500)}


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
