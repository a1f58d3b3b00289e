"""`awm eval catalog` (rank a policy on the catalog) and `awm rollout` (one judged episode); the `awm` CLI forwards
argv here.

Every ready environment's eligible tasks (or a seeded sample per environment), k attempts each, through
awm_rl.evaluation.catalog.evaluate (the `evaluation` asset's function): pass@1 and pass@k per environment, per category
and overall, turns, tokens, cost and failure reasons. A run folder is resumable: `--resume RUN_DIR`, or the same
`--out` again, runs only the episodes not on disk. Exit codes: 0 done, 2 bad input or a policy configuration
error (what finished is kept), 1 failure, 130 interrupted (what finished is kept).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awm_resources.store import ArtifactStore

POLICY_HELP = "reference | chat:<litellm model> | transformers:<path> | tiny | vllm:<model>"
# Plan options: None on the command line means "the resumed run's value, else the default".
DEFAULTS: dict[str, Any] = {"tasks_per_env": None, "k": 1, "seed": 0, "window": 10, "max_turns": 20, "judge": "code"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="awm eval catalog",
        description="Evaluate a policy on every ready environment of the catalog: k attempts per eligible task, "
                    "pass@1 and pass@k per environment, per category and overall, turns, tokens, cost and failure "
                    "reasons. Episodes are written as they finish; --resume (or the same --out) runs only the missing ones.")
    from awm_rl.agent.policies import add_chat_options

    # No default policy: a run names the policy it ranks (a resumed one has its own).
    p.add_argument("--policy", default=None, help=f"{POLICY_HELP} (required unless --resume)")
    add_chat_options(p)
    p.add_argument("--tasks-per-env", type=int, default=None,
                   help="a seeded sample of N eligible tasks per environment (default: every eligible task)")
    p.add_argument("--k", type=int, default=None, help="attempts per task; pass@k is reported for this k (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed of the per-environment task sample (default 0)")
    p.add_argument("--scenario", action="append", default=None, help="only this environment (repeat; default: the catalog)")
    p.add_argument("--concurrency", type=int, default=4, help="episodes run at once (default 4)")
    p.add_argument("--max-requests", type=int, default=None,
                   help="turns being generated at once, across all episodes (default: no bound beyond --concurrency)")
    p.add_argument("--judge", choices=["code", "llm", "sql"], default=None, help="judge mode (default code: offline)")
    p.add_argument("--judge-model", default=None, help="litellm model for llm/sql judging (default $AWM_JUDGE_MODEL)")
    p.add_argument("--window", type=int, default=None, help="history window w (default 10; -1: full history)")
    p.add_argument("--max-turns", type=int, default=None, help="model turns per episode (default 20)")
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (default 0.6, the paper's)")
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--top-k", type=int, default=20, help="0: no top-k cut")
    p.add_argument("--store", default=None, help="artifact store root (default $AWM_HOME)")
    p.add_argument("--out", type=Path, default=None,
                   help="run folder (default $AWM_HOME/evaluations/catalog-<policy>-<time>); an existing one is resumed")
    p.add_argument("--resume", type=Path, default=None, help="resume this run folder with its own plan")
    p.add_argument("--prove", action="store_true",
                   help="then replay the run's episodes as proofs and evidence for the quality gate (as `awm quality "
                        "--proofs-from` does): completed ones become their tasks' reference solutions")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _fail(message: str, code: int = 2) -> int:
    print(f"awm eval catalog: {message}", file=sys.stderr)
    return code


def _plan(args: argparse.Namespace, stored: dict[str, Any] | None) -> dict[str, Any]:
    """The plan options: those given, else the resumed run's (`run.json`), else the defaults. evaluate() checks
    the result against the run folder."""
    if stored is None:
        resumed: dict[str, Any] = {}
    else:
        resumed = {key: stored[key] for key in ("policy", "reasoning", "tool_calling", "tasks_per_env", "k", "seed",
                                               "max_turns") if key in stored}
        if "window" in stored:
            resumed["window"] = -1 if stored["window"] is None else stored["window"]
        if "judge_mode" in stored:
            resumed["judge"] = stored["judge_mode"]
    out = {}
    for key, default in {**DEFAULTS, "policy": None, "reasoning": None, "tool_calling": "text"}.items():
        given = getattr(args, key)
        out[key] = given if given is not None else resumed.get(key, default) if key in resumed else default
    return out


def catalog_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if "--tool-calling" not in argv and not any(a.startswith("--tool-calling=") for a in argv):
        args.tool_calling = None  # not given: the resumed run's mode, else text
    from awm_resources.llm import judge_client
    from awm_resources.names import policy_slug
    from awm_resources.settings import judge_llm_config
    from awm_rl.agent import make_policy
    from awm_rl.agent.policies import PolicyConfigError, PolicyError
    from awm_rl.evaluation.catalog import RUN_FILE, EvaluationRunError, evaluate
    from awm_rl.reward import Judge

    if args.resume is not None and args.out is not None and args.resume.resolve() != args.out.resolve():
        return _fail(f"--resume {args.resume} and --out {args.out} name two folders: give one")
    out = args.resume or args.out
    stored = None
    if out is not None and (out / RUN_FILE).is_file():
        try:
            run = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
            stored, drawn = run["plan"], sorted({str(s) for s, _ in run["tasks"]})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return _fail(f"{out / RUN_FILE} is unreadable: {type(exc).__name__}: {exc}")
        if args.scenario and sorted(set(args.scenario)) != drawn:  # the run's task list was drawn once, at its start
            return _fail(f"{out} evaluates {', '.join(drawn)}; --scenario {' '.join(args.scenario)} would change "
                         "that: resume it without --scenario, or evaluate into another folder")
    elif args.resume is not None:
        return _fail(f"--resume {args.resume}: no {RUN_FILE} there (not an `awm eval catalog` run folder)")
    plan = _plan(args, stored)
    if not plan["policy"]:
        return _fail("--policy is required (" + POLICY_HELP + ")")
    for name, value, low in (("--k", plan["k"], 1), ("--tasks-per-env", plan["tasks_per_env"], 1),
                             ("--concurrency", args.concurrency, 1), ("--max-requests", args.max_requests, 1),
                             ("--max-turns", plan["max_turns"], 1)):
        if value is not None and value < low:
            return _fail(f"{name} must be at least {low}, got {value}")
    store = ArtifactStore(Path(args.store) if args.store else None)
    try:  # a chat policy's API base and key default to AWM_POLICY_API_BASE / AWM_POLICY_API_KEY (make_policy)
        policy = make_policy(plan["policy"], api_base=args.api_base, api_key=args.api_key,
                             reasoning=plan["reasoning"], tool_calling=plan["tool_calling"],
                             max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                             top_k=args.top_k)
        judge_llm = judge_client(judge_llm_config(model=args.judge_model), max_tokens=2048) if plan["judge"] != "code" else None
        judge = Judge(plan["judge"], llm=judge_llm)
    except (ValueError, PolicyError) as exc:
        return _fail(str(exc))
    out = out or store.root / "evaluations" / f"catalog-{policy_slug(plan['policy'])}-{time.strftime('%Y%m%d-%H%M%S')}"
    from awm_rl.runtime.pool import EnvironmentPool, PoolError

    pool = LazyPool(lambda: EnvironmentPool(store.root))
    try:
        with pool:
            evaluate(store, pool, policy, judge, out_dir=out, tasks_per_env=plan["tasks_per_env"], k=plan["k"],
                     seed=plan["seed"], window=None if plan["window"] < 0 else plan["window"],
                     max_turns=plan["max_turns"], scenarios=args.scenario, concurrency=args.concurrency,
                     max_requests=args.max_requests,
                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    except PolicyConfigError as exc:
        return _fail(f"{exc} (finished episodes are kept in {out}; rerun with --resume {out})")
    except KeyboardInterrupt:
        return _fail(f"interrupted; finished episodes are kept in {out}; rerun with --resume {out}", 130)
    except (EvaluationRunError, FileNotFoundError, ValueError) as exc:
        return _fail(str(exc))
    except PoolError as exc:
        return _fail(f"the environment runtime failed: {exc}", 1)
    summary = json.loads((out / "report.json").read_text(encoding="utf-8"))
    if args.prove:
        from awm_rl.quality.gate import prove_and_recheck
        from awm_rl.quality.proofs import load_episodes

        proofs = prove_and_recheck(store, load_episodes(out), run=out.name)
        summary["proofs"] = {k: proofs[k] for k in ("counts", "proven", "gate")}
        print(f"proofs: {proofs['counts']}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    print(render(summary))
    return 0


class LazyPool:
    """The runtime pool (awm_rl.runtime.pool), started only when there are episodes to run (evaluate() calls
    `start` then, in its own thread: Ray is initialised there, not in an episode's worker thread): a resumed run
    with nothing left to run reports without starting Ray."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self._start, self._pool, self._lock = start, None, threading.Lock()

    def start(self) -> None:
        self._get()

    def _get(self) -> Any:
        with self._lock:
            if self._pool is None:
                self._pool = self._start()
            return self._pool

    def acquire(self, scenario: str) -> Any:
        return self._get().acquire(scenario)

    def list_tools(self, handle: Any) -> list[dict[str, Any]]:
        return self._get().list_tools(handle)

    def call_tool(self, handle: Any, name: str, arguments: dict[str, Any]) -> Any:
        return self._get().call_tool(handle, name, arguments)

    def reset(self, handle: Any) -> None:
        self._get().reset(handle)

    def snapshot(self, handle: Any) -> tuple[Path, Path] | None:
        return self._get().snapshot(handle)

    def release(self, handle: Any) -> None:
        self._get().release(handle)

    def __enter__(self) -> LazyPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.close()


def render(report: dict[str, Any]) -> str:
    """The report as text: one line per environment and category, the overall line and the failure reasons."""
    k = report["k"]

    def line(name: str, g: dict[str, Any]) -> str:
        at_k = "-" if g.get("pass_at_k") is None else f"{g['pass_at_k']:.2f}"
        return (f"  {name:<34} {g['tasks']:>5} {g['episodes']:>8} {g['pass_at_1']:>7.2f} {at_k:>7} "
                f"{g['mean_turns']:>6.1f} {g['prompt_tokens'] + g['completion_tokens']:>10} {g['cost_usd']:>9.4f}")

    head = f"  {'':<34} {'tasks':>5} {'episodes':>8} {'pass@1':>7} {'pass@' + str(k):>7} {'turns':>6} {'tokens':>10} {'cost $':>9}"
    overall = {key: report[key] for key in ("tasks", "episodes", "pass_at_1", "pass_at_k", "mean_turns",
                                            "prompt_tokens", "completion_tokens", "cost_usd")}
    lines = [f"{report['policy']} (reasoning {report['reasoning']}, tool calling {report['tool_calling']}): "
             f"{report['episodes']} episodes, {report['episodes_run']} run now, {report['episodes_resumed']} found "
             f"on disk, {report['wall_s']:.1f}s", "per environment:", head]
    lines += [line(name, g) for name, g in report["per_environment"].items()]
    lines += ["per category:", head] + [line(name, g) for name, g in report["per_category"].items()]
    lines += ["overall:", head, line("all", overall)]
    reasons = ", ".join(f"{r} {n}" for r, n in report["failure_reasons"].items()) or "none"
    lines += [f"failures: {reasons}", f"report: {report['out_dir']}/report.json"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- awm rollout


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
    """`awm rollout`: one episode of one task with a chosen policy, judged in a chosen mode; writes the trajectory,
    both databases and the verdict to a folder. Exit codes: 0 done (whatever the reward), 2 bad input, 1 failure."""
    args = _rollout_parser().parse_args(argv)
    from awm_rl.agent import EpisodeSpec, LoopConfig, make_policy, run_episode
    from awm_rl.agent.policies import PolicyConfigError, PolicyError, policy_options
    from awm_rl.reward import Judge, load_task, needs_judge, score_episode

    store = ArtifactStore(Path(args.store) if args.store else None)
    try:
        record = load_task(store, args.scenario, args.task)
    except (FileNotFoundError, IndexError, ValueError) as exc:
        print(f"awm rollout: {exc}", file=sys.stderr)
        return 2
    try:
        from awm_resources.llm import judge_client
        from awm_resources.settings import judge_llm_config

        policy = make_policy(args.policy, solutions_dir=args.solutions, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature, **policy_options(args))
        judge_llm = None
        if args.judge != "code":
            judge_llm = judge_client(judge_llm_config(model=args.judge_model), max_tokens=2048)
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

