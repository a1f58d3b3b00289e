"""`awm audit verifiers` (the `awm` CLI forwards argv here): the do-nothing audit of every verifier in the store
(`awm_rl.reward.audit`). Exit codes: 0 done (whatever the findings, unless --strict), 2 bad input, 1 failure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


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
    """`awm audit verifiers`: every verifier on its unchanged database."""
    if argv and argv[0] == "verifiers":
        argv = argv[1:]
    args = _audit_parser().parse_args(argv)
    from awm_resources.store import ArtifactStore
    from awm_rl.reward.audit import audit_verifiers, summarize, write_audit

    store = ArtifactStore(Path(args.store) if args.store else None)
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

