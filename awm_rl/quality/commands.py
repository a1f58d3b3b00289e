"""`awm quality [SCENARIO ...] [--json]`: probe every tool and check every task of stored environments."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _table(report: dict) -> str:
    head = ("| scenario | tools | ok | server error | 5xx on edge input | client errors only | shadowed | "
            "tasks eligible | vacuous | goal met | blocked (tool / data / writes) | unsolvable | crash | "
            "solvable (proven) |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in report["scenarios"]:
        tasks = s.get("tasks", [])
        rows.append(f"| {s['scenario']} | {s['tools_total']} | {s['tools_ok']} | {s['tools_server_error']} | "
                    f"{s['tools_server_error_on_edge']} | {s['tools_client_error_only']} | {s['shadowed']} | "
                    f"{s.get('eligible_tasks', 0)}/{len(tasks)} | {s['vacuous']} | {s.get('goal_met', 0)} | "
                    f"{s['blocked']} ({s.get('blocked_by_tool', 0)} / {s.get('blocked_by_data', 0)} / "
                    f"{s.get('blocked_by_writes', 0)}) | "
                    f"{s['unsolvable']} | {s['crash']} | {sum(1 for t in tasks if t.get('solvable') == 'yes')} |")
    t = report["totals"]
    rows.append(f"\n{t['environments_with_server_errors']} of {t['environments']} environments have a tool that "
                f"answers 5xx on valid input ({t['tools_server_error']} of {t['tools_total']} tools); "
                f"{t['environments_with_bugs']} have a bug of any kind ({t['bugs_per_environment']} per environment); "
                f"{t['tasks_eligible']} of {t['tasks']} tasks eligible, {t['share_blocked']:.0%} blocked "
                f"({t.get('blocked_by_tool', 0)} by a tool, {t.get('blocked_by_data', 0)} by data, "
                f"{t.get('blocked_by_writes', 0)} by writes no tool makes; the paper: "
                f"{t.get('paper_share_blocked', 0.14):.0%}), {t.get('goal_met', 0)} with the goal already met; "
                f"{t.get('tasks_with_answers_in_tools', 0)} tasks have a literal in the tool listing.")
    for s in report["scenarios"]:
        if s.get("error"):
            rows.append(f"  {s['scenario']}: {s['error']}")
        bad = {k: v for k, v in s.get("tools", {}).items() if v["status"] not in ("ok", "client_error_only")}
        for name, tool in bad.items():
            first = tool["errors"][0] if tool.get("errors") else None
            why = f"HTTP {first['status_code']} {str(first['error']).splitlines()[0][:160] if first['error'] else ''} args={json.dumps(first['args'])[:160]}" \
                if first else tool.get("note", "")
            rows.append(f"  {s['scenario']}.{name}: {tool['status']}: {why}")
        for task in s.get("tasks", []):
            if not task["eligible"]:
                rows.append(f"  {s['scenario']} task {task['task_idx']}: {task['verdict']}: {task['reason'][:240]}")
            for leak in task.get("answers_in_tools", [])[:3]:
                rows.append(f"  {s['scenario']} task {task['task_idx']}: answer in the tool listing: "
                            f"{leak['literal'][:60]!r} in {leak['tool']} ({leak['where']})")
    return "\n".join(rows)


def quality_main(argv: list[str]) -> int:
    from awm_resources.store import ArtifactStore
    from awm_rl.quality.gate import quality

    p = argparse.ArgumentParser(prog="awm quality", description=__doc__)
    p.add_argument("scenarios", nargs="*", help="scenario names (default: every scenario with environment code)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--fresh", action="store_true", help="re-run checks even where a stored result matches")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for importing and probing one environment")
    p.add_argument("--judge", choices=["llm", "sql"], default=None,
                   help="also require the rollout judge in this mode to call each reference solution Completed")
    p.add_argument("--judge-model", default=None, help="litellm model of the judge (default $AWM_JUDGE_MODEL or replay)")
    p.add_argument("--proofs-from", type=Path, default=None, metavar="DIR",
                   help="replay the agent episodes under DIR (trajectory.json files) and keep those that pass as proofs")
    p.add_argument("--run", default=None, help="with --proofs-from: the run name kept as the proofs' provenance")
    args = p.parse_args(argv)
    if args.proofs_from:
        return _proofs_main(args)
    judge = None
    if args.judge:
        from awm_resources.llm import judge_client
        from awm_resources.settings import judge_llm_config
        from awm_rl.reward.judge import Judge

        judge = Judge(args.judge, llm=judge_client(judge_llm_config(model=args.judge_model)))
    store = ArtifactStore(None)
    unknown = [s for s in args.scenarios if not store.scenario_dir(s).is_dir()]
    if unknown:
        print(f"awm quality: unknown scenario(s) {unknown} in {store.root}", file=sys.stderr)
        return 2
    report = quality(store, args.scenarios or None, reuse=not args.fresh, timeout_s=args.timeout, judge=judge)
    print(json.dumps(report, indent=2, ensure_ascii=False, default=str) if args.json else _table(report))
    return 0


def _proofs_main(args: argparse.Namespace) -> int:
    """`awm quality --proofs-from DIR`: agent episodes as proofs (awm_rl/quality/proofs.py)."""
    from awm_resources.store import ArtifactStore
    from awm_rl.quality.gate import prove_and_recheck
    from awm_rl.quality.proofs import load_episodes

    try:
        episodes = load_episodes(args.proofs_from)
    except (FileNotFoundError, ValueError) as exc:
        print(f"awm quality: {exc}", file=sys.stderr)
        return 2
    if not episodes:
        print(f"awm quality: no episodes (trajectory.json) under {args.proofs_from}", file=sys.stderr)
        return 2
    store = ArtifactStore(None)
    episodes = [e for e in episodes if not args.scenarios or e.scenario in args.scenarios]
    report = prove_and_recheck(store, episodes, run=args.run or args.proofs_from.name, timeout_s=args.timeout)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
        return 0
    print(f"{len(episodes)} episode(s): " + ", ".join(f"{n} {k}" for k, n in report["counts"].items() if n))
    for f in report["episodes"]:
        print(f"  {f['scenario']} task {f['task_idx']} ({f['policy']}): {f['kind']}: {f['detail'][:240]}")
    for scenario, row in report["gate"].items():
        print(f"  gate {scenario}: {row['eligible_tasks']} eligible, {row['blocked']} blocked, {row['goal_met']} goal met")
    return 0


def bench_quality_main(argv: list[str]) -> int:
    """`awm bench quality --json`: seconds to probe each stored environment, against importing it alone."""
    import time

    from awm_resources.store import ArtifactStore
    from awm_rl.quality.envcheck import check_env_code

    p = argparse.ArgumentParser(prog="awm bench quality", description=bench_quality_main.__doc__)
    p.add_argument("scenarios", nargs="*", help="scenario names (default: every scenario with environment code)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    store = ArtifactStore(None)
    names = args.scenarios or [s for s in store.list_scenarios() if store.has(s, "server.py")]
    rows = []
    for name in names:
        code, db = store.path(name, "server.py").read_text(encoding="utf-8"), store.path(name, "initial.db")
        t0 = time.perf_counter()
        base = check_env_code(code, db)  # baseline: the same worker, import + health check only
        t1 = time.perf_counter()
        probed = check_env_code(code, db, probe=True)
        t2 = time.perf_counter()
        calls = sum(t["calls"] for t in (probed.probe or {}).values())
        rows.append({"scenario": name, "tools": len(probed.tools), "probe_calls": calls,
                     "baseline_s": round(t1 - t0, 3), "probe_s": round(t2 - t1, 3),
                     "probe_only_s": round((t2 - t1) - (t1 - t0), 3),
                     "ratio_vs_baseline": round((t2 - t1) / max(t1 - t0, 1e-9), 3), "ok": base.ok or bool(base.tools)})
    out = {"benchmark": "quality_probe", "scenarios": rows,
           "max_probe_s": max((r["probe_s"] for r in rows), default=0.0),
           "max_probe_s_per_20_tools": max((r["probe_s"] * 20 / max(r["tools"], 1) for r in rows), default=0.0)}
    print(json.dumps(out, indent=2) if args.json else "\n".join(
        f"{r['scenario']}: {r['tools']} tools, {r['probe_calls']} calls, probe {r['probe_s']}s "
        f"(import-only baseline {r['baseline_s']}s, x{r['ratio_vs_baseline']})" for r in rows))
    return 0
