"""`awm rollout ...` and `awm audit verifiers ...` (the `awm` CLI forwards argv here).

rollout: one episode of one task with a chosen policy, judged in a chosen mode; writes the
trajectory, both databases and the verdict to a folder. audit: the do-nothing audit of every
verifier in the store (see awm_rl.reward.audit).
Exit codes: 0 done (whatever the reward or audit findings, unless --strict), 2 bad input, 1 failure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def _store(root: str | None):
    from awm_resources.store import ArtifactStore

    return ArtifactStore(Path(root) if root else None)


def _rollout_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="awm rollout", description="Run one task episode and judge it.")
    p.add_argument("--scenario", required=True, help="scenario key in the store")
    p.add_argument("--task", type=int, required=True, help="task index (0-based)")
    from awm_rl.agent.policies import add_policy_options

    add_policy_options(p)
    p.add_argument("--judge", choices=["code", "llm", "sql"], default="code", help="judge mode (default code: offline)")
    p.add_argument("--judge-model", default=None, help="litellm model for llm/sql judging (default $AWM_JUDGE_MODEL or replay)")
    p.add_argument("--window", type=int, default=10, help="history window w (default 10; -1: full history)")
    p.add_argument("--max-turns", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--solutions", type=Path, default=None, help="folder of reference solutions (default seeds/solutions)")
    p.add_argument("--store", default=None, help="artifact store root (default $AWM_HOME)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default $AWM_HOME/rollouts/<scenario>.t<N>.<time>)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    return p


def rollout_main(argv: list[str]) -> int:
    args = _rollout_parser().parse_args(argv)
    from awm_rl.agent import EpisodeSpec, LoopConfig, make_policy, run_episode
    from awm_rl.agent.policies import PolicyConfigError, PolicyError, policy_options
    from awm_rl.reward import Judge, load_task, needs_judge, score_episode

    store = _store(args.store)
    try:
        record = load_task(store, args.scenario, args.task)
    except (FileNotFoundError, IndexError, ValueError) as exc:
        print(f"awm rollout: {exc}", file=sys.stderr)
        return 2
    try:
        from awm_resources.settings import judge_llm_config

        policy = make_policy(args.policy, solutions_dir=args.solutions, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature, **policy_options(args))
        judge_llm = None
        if args.judge != "code":
            judge_llm = judge_llm_config(model=args.judge_model).client(max_tokens=2048)
        judge = Judge(args.judge, llm=judge_llm)
    except (ValueError, PolicyError) as exc:
        print(f"awm rollout: {exc}", file=sys.stderr)
        return 2
    out = args.out or store.root / "rollouts" / f"{args.scenario}.t{args.task}.{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    config = LoopConfig(max_turns=args.max_turns, window=None if args.window < 0 else args.window,
                        snapshot_dir=out / ".snapshots")
    from awm_rl.runtime.pool import EnvironmentPool, PoolError

    try:
        with EnvironmentPool(store.root, num_hosts=1, prefetch=0) as pool:
            episode = run_episode(pool, policy, EpisodeSpec(args.scenario, args.task, record.task), config)
    except (PoolError, PolicyConfigError) as exc:
        print(f"awm rollout: {exc}", file=sys.stderr)
        return 2
    files = _place_databases(episode, out)
    verdict = judge.judge(episode, record) if needs_judge(episode) else None
    score = score_episode(episode, verdict)
    (out / "trajectory.json").write_text(episode.model_dump_json(indent=2), encoding="utf-8")
    (out / "verdict.json").write_text(score.model_dump_json(indent=2), encoding="utf-8")
    files.update({"trajectory": str(out / "trajectory.json"), "verdict": str(out / "verdict.json")})
    summary = {"scenario": args.scenario, "task_idx": args.task, "policy": policy.name,
               "reasoning_rule": episode.reasoning_rule, "tool_calling": getattr(policy, "tool_calling", "text"),
               "judge_mode": args.judge,
               "termination": episode.termination, "outcome": score.outcome, "reward": score.reward,
               "turns": episode.turns, "tool_calls": episode.tool_calls, "format_rule": episode.format_rule,
               "reasons": score.reasons, "out_dir": str(out), "files": files}
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(f"{args.scenario} task {args.task}: {score.outcome} (reward {score.reward}) after {episode.turns} turns "
              f"[{episode.termination}] -> {out}\n  {score.reasons[:300]}")
    return 0


def _place_databases(episode: Any, out: Path) -> dict[str, str]:
    """Move the episode's database copies to `out/initial.db` and `out/final.db`."""
    files: dict[str, str] = {}
    for name in ("initial_db", "final_db"):
        src = getattr(episode, name)
        if src and Path(src).is_file():
            target = out / f"{name.replace('_db', '')}.db"
            shutil.move(src, target)
            setattr(episode, name, str(target))
            files[name.replace("_db", "")] = str(target)
    shutil.rmtree(out / ".snapshots", ignore_errors=True)
    return files


def _audit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="awm audit verifiers",
                                description="Run every verifier on its unchanged database (the do-nothing agent).")
    p.add_argument("--scenario", action="append", default=None, help="limit to these scenarios (repeatable)")
    p.add_argument("--store", default=None, help="artifact store root (default $AWM_HOME)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per verifier")
    p.add_argument("--write", action="store_true", help="store <scenario>/verifier_audit.json")
    p.add_argument("--strict", action="store_true", help="exit 1 when any verifier is not ok")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per verifier")
    return p


def audit_main(argv: list[str]) -> int:
    if argv and argv[0] == "verifiers":
        argv = argv[1:]
    args = _audit_parser().parse_args(argv)
    from awm_rl.reward.audit import audit_verifiers, summarize, write_audit

    store = _store(args.store)
    known = set(store.list_scenarios())
    unknown = [s for s in args.scenario or [] if s not in known]
    if unknown:
        print(f"awm audit verifiers: unknown scenario(s) {unknown} in store {store.root} "
              f"(known: {', '.join(sorted(known)) or 'none'})", file=sys.stderr)
        return 2
    entries = audit_verifiers(store, args.scenario, timeout_s=args.timeout)
    if args.write:
        write_audit(store, entries)
    if args.json:
        rows = [{k: e.model_dump()[k] for k in ("scenario", "task_idx", "mode", "verdict", "detail")} for e in entries]
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for e in entries:
            if e.verdict != "ok":
                print(f"{e.verdict:8} {e.scenario} task {e.task_idx} [{e.mode}]: {e.detail[:200]}")
        summary = summarize(entries)
        print(json.dumps({k: v for k, v in summary.items() if k != "excluded"}))
    if args.strict and any(e.verdict != "ok" for e in entries):
        return 1
    return 0


if __name__ == "__main__":  # python -m awm_rl.commands_rollout rollout|audit ...
    command, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "rollout":
        sys.exit(rollout_main(rest))
    if command == "audit":
        sys.exit(audit_main(rest))
    print("usage: python -m awm_rl.commands_rollout rollout|audit ...", file=sys.stderr)
    sys.exit(2)
