"""`awm eval bfcl`: run a policy over a BFCL category through our agent loop, scored by BFCL's checker."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from awm_resources.names import policy_slug
from awm_rl.bfcl.data import ALL_CATEGORIES, CATEGORY_GROUPS


def build_parser() -> argparse.ArgumentParser:
    from awm_rl.bfcl.runner import POLICY_HELP

    p = argparse.ArgumentParser(
        prog="awm eval bfcl",
        description="Evaluate a policy on BFCL (bfcl-eval's bundled data) through the AWM agent loop; every case is "
                    "scored by BFCL's own checkers, and BFCL's overall from its own leaderboard code. Trajectories go to --out "
                    "(one JSON per case; <out>/<category>/ when several categories run).")
    p.add_argument("--category", required=True,
                   help=f"one of {', '.join(ALL_CATEGORIES)}, or a group: {', '.join(CATEGORY_GROUPS)} (all: BFCL v3's "
                        "17 categories and BFCL's overall)")
    p.add_argument("--policy", default="ground_truth", help=POLICY_HELP)
    p.add_argument("--limit", type=int, default=None, help="first N cases of the category (default: all)")
    p.add_argument("--ids", nargs="*", help="only these case ids (e.g. multi_turn_base_3)")
    p.add_argument("--out", default=None, help="output folder (default $AWM_HOME/bfcl/<category>/<policy>-<time>)")
    p.add_argument("--concurrency", type=int, default=4, help="cases run at once")
    from awm_rl.agent.policies import add_chat_options

    add_chat_options(p)
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (BFCL uses 0)")
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--max-steps-per-turn", type=int, default=None,
                   help="model turns with calls allowed per user turn (default twice BFCL's MAXIMUM_STEP_LIMIT)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: one category {category, policy, cases, accuracy, per_case, bfcl_eval_version, "
                        "overall}; several {policy, bfcl_eval_version, categories, overall, leaderboard}")
    p.add_argument("--no-per-case", action="store_true", help="leave the per-case rows out of a several-category JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from awm_resources.store import default_home
    from awm_rl.agent.policies import PolicyError, policy_options
    from awm_rl.bfcl.data import BFCLUnavailable, expand_categories
    from awm_rl.bfcl.runner import BFCLPolicyError, evaluate_suite

    if args.limit is not None and args.limit < 1:
        print("awm eval bfcl: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        categories = expand_categories(args.category)
    except BFCLUnavailable as exc:
        print(f"awm eval bfcl: {exc}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    single = len(categories) == 1
    out = Path(args.out) if args.out else default_home() / "bfcl" / args.category / f"{policy_slug(args.policy)}-{stamp}"
    try:
        # BFCL's backends and model libraries may print; stdout carries only our answer.
        with contextlib.redirect_stdout(sys.stderr):
            suite = evaluate_suite(categories, args.policy, out_dir=out, out_dirs={categories[0]: out} if single else None,
                                   limit=args.limit, ids=args.ids, concurrency=args.concurrency,
                                   max_steps_per_turn=args.max_steps_per_turn, **policy_options(args),
                                   temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    except (BFCLUnavailable, BFCLPolicyError, PolicyError) as exc:
        print(f"awm eval bfcl: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = suite.reports[categories[0]].summary() if single else suite.summary(per_case=not args.no_per_case)
        if single:
            doc["overall"] = suite.overall
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    for r in suite.reports.values():
        print(f"{r.category}: {r.policy} {r.accuracy:.1%} of {r.cases} case(s) in {r.wall_s:.1f}s "
              f"(failures: {r.error_types or 'none'}); trajectories in {r.out_dir}/cases")
    overall = suite.overall.get("overall")
    print(f"BFCL overall (bfcl-eval {suite.bfcl_eval_version}'s leaderboard aggregation over the categories run; "
          f"agentic categories count 0): {'n/a' if overall is None else f'{overall:.2%}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
