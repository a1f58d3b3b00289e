"""`awm eval mcp-universe`: MCP-Universe tasks through our agent loop, scored by MCP-Universe's evaluators."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from awm_resources.names import policy_slug

POLICY_HELP = ("scripted:<file.json> ({task id: {calls, final_answer}}) | tiny | chat:<litellm model> | "
               "transformers:<path> | vllm:<model>")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="awm eval mcp-universe",
        description="Evaluate a policy on MCP-Universe tasks through the AWM agent loop; each answer is scored by "
                    "MCP-Universe's own evaluators. Tasks whose servers need live services are skipped offline, "
                    "with the servers named.")
    p.add_argument("--tasks", required=True, type=Path,
                   help="a benchmark .yaml of MCP-Universe's repository, a folder of task .json files, or one")
    p.add_argument("--policy", required=True, help=POLICY_HELP)
    p.add_argument("--online", action="store_true",
                   help="also run tasks whose servers need live services (network, API keys in the environment)")
    p.add_argument("--limit", type=int, default=None, help="first N tasks")
    p.add_argument("--max-turns", type=int, default=20, help="model turns per task (default 20)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--out", default=None, help="output folder (default $AWM_HOME/mcp_universe/<policy>-<time>)")
    p.add_argument("--mcpu-python", type=Path, default=None,
                   help="Python of MCP-Universe's venv (default .venv/mcpuniverse beside this one)")
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
    from awm_rl.mcp_universe import MCPUniverseUnavailable, evaluate_mcp_universe

    if args.limit is not None and args.limit < 1:
        print("awm eval mcp-universe: --limit must be at least 1", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (default_home() / "mcp_universe"
                                           / f"{policy_slug(args.policy)}-{time.strftime('%Y%m%d-%H%M%S')}")
    chat = {k: v for k, v in policy_options(args).items() if v not in (None, "text")}
    if args.policy.startswith("scripted:") and chat:
        print(f"awm eval mcp-universe: {', '.join(sorted(chat))} apply to chat policies, not to {args.policy}",
              file=sys.stderr)
        return 2
    kwargs = {} if args.policy.startswith("scripted:") else {
        **policy_options(args), "temperature": args.temperature, "max_new_tokens": args.max_new_tokens}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # model libraries may print; stdout carries the answer
            report = evaluate_mcp_universe(args.tasks, args.policy, out_dir=out, online=args.online, limit=args.limit,
                                           max_turns=args.max_turns, concurrency=args.concurrency,
                                           python=args.mcpu_python, **kwargs)
    except (MCPUniverseUnavailable, PolicyError, ValueError) as exc:
        print(f"awm eval mcp-universe: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.summary(), indent=2, ensure_ascii=False))
    else:
        rate = "n/a" if report.success_rate is None else f"{report.success_rate:.3f}"
        print(f"MCP-Universe: {report.policy} success rate {rate} over {report.ran} of {report.tasks} task(s) "
              f"({report.package} {report.package_version}); skipped offline: {len(report.skipped)} "
              f"(servers needing live services: {', '.join(report.live_servers) or 'none'}); "
              f"trajectories in {report.out_dir}/tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
