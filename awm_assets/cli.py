"""The `awm` command: import/export/catalog/synth here; serving, rollouts, audits and training forward to awm_rl."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _print(obj, as_json: bool, text: str) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False) if as_json else text)


def cmd_import(args) -> int:
    from awm_resources.store import ArtifactStore

    from awm_assets.importing import import_into_dagster
    from awm_assets.instance import get_instance

    src = Path(args.dir)
    if not src.is_dir():
        print(f"awm import: {src} is not a folder", file=sys.stderr)
        return 2
    store = ArtifactStore(args.home)
    try:
        report = import_into_dagster(src, store, None if args.no_dagster else get_instance())
    except FileNotFoundError as exc:
        print(f"awm import: {exc}", file=sys.stderr)
        return 2
    lines = [f"imported {len(report.scenarios)} scenario(s) from {src} into {store.root}"]
    for key, s in report.scenarios.items():
        lines.append(f"  {key}: present {[st for st in s.stages if st != 'scenario']}, missing {s.missing}")
    if report.issues:
        lines.append(f"{len(report.issues)} issue(s):")
        lines += [f"  {i}" for i in report.issues]
    _print(report.to_dict(), args.json, "\n".join(lines))
    return 0


def cmd_export(args) -> int:
    from awm_resources.interop import export_awm_dir
    from awm_resources.store import ArtifactStore

    written = export_awm_dir(ArtifactStore(args.home), Path(args.dir), args.scenarios or None)
    _print(written, args.json, "\n".join(f"{f}: {n} lines" for f, n in written.items()) or "nothing to export")
    return 0


def cmd_catalog(args) -> int:
    from awm_resources.store import ArtifactStore

    from awm_assets.synthesis.catalog import build_catalog

    if args.refresh:  # the refresh_catalog job (quality gate + catalog.json), recorded in the Dagster instance
        from awm_assets.headless import refresh_catalog
        from awm_assets.instance import get_instance

        result = refresh_catalog(get_instance())
        if not result.success:
            print(f"awm catalog: the refresh_catalog run {result.run_id} failed; see it in the Dagster UI", file=sys.stderr)
            return 1
    entries = build_catalog(ArtifactStore(args.home))
    if args.ready:
        entries = [e for e in entries if e["ready"]]
    text = "\n".join(f"{e['name']:40s} {'ready' if e['ready'] else 'not ready':9s} tasks={e['tasks']} tables={e['tables']} "
                     f"tools={e['tools']} verifiers={e['verifiers']} source={e['source']}" for e in entries)
    _print(entries, args.json, text or "the store is empty")
    return 0


def cmd_synth(args) -> int:
    from awm_assets.headless import synthesize_batch
    from awm_assets.synthesis.seeds import SeedFileError

    try:
        out = synthesize_batch(Path(args.seed_batch), workers=args.workers, resynthesize=args.all)
    except SeedFileError as exc:
        print(f"awm synth: {exc}", file=sys.stderr)
        return 2
    lines = [f"seed batch {out['seed_batch']}: new scenarios {out['new_scenarios']}"]
    for s in out["scenarios"]:
        stages = ", ".join(f"{k}={v['status']}/{v['attempts']}" for k, v in s["stages"].items())
        lines.append(f"  {s['scenario']}: {'ready' if s['ready'] else 'NOT READY'} ({stages})")
    _print(out, args.json, "\n".join(lines))
    ok = out.get("generation_ok") and all(s["ready"] for s in out["scenarios"])
    return 0 if ok else 1


def cmd_repair(args) -> int:
    import dagster as dg
    from awm_resources.store import ArtifactStore

    from awm_assets.instance import get_instance
    from awm_assets.repair_job import repair_headless
    from awm_assets.synthesis.repair import repair_table

    store = ArtifactStore(args.home)
    names = args.scenarios or [s for s in store.list_scenarios() if store.has(s, "server.py")]
    unknown = [s for s in names if not store.has(s, "server.py")]
    if unknown:
        print(f"awm repair: no stored env code (server.py) for {unknown} in {store.root}", file=sys.stderr)
        return 2
    config = {"attempts": args.attempts, "phases": args.phases, "tasks": args.tasks or []}
    instance = dg.DagsterInstance.ephemeral() if args.no_dagster else get_instance()
    reports = repair_headless(names, config, instance)
    done = [r for r in reports if "before" in r]
    text = repair_table(done) if done else ""
    text += "".join(f"\n{r['scenario']}: FAILED: {r['error']}" for r in reports if "before" not in r)
    _print({"scenarios": reports}, args.json, text.strip() or "nothing to repair")
    return 0 if all("before" in r and not r.get("error") for r in reports) else 1


def _forward(module: str, func: str, argv: list[str]) -> int:
    import importlib

    return int(getattr(importlib.import_module(module), func)(argv) or 0)


FORWARDED = {
    "serve": ("awm_rl.runtime.commands", "serve_main"),
    "rollout": ("awm_rl.commands_rollout", "rollout_main"),
    "train": ("awm_rl.training.commands", "train_main"),
    "quality": ("awm_rl.quality.commands", "quality_main"),
}
FORWARDED_PAIRS = {
    ("bench", "serve"): ("awm_rl.runtime.commands", "bench_serve_main"),
    ("bench", "quality"): ("awm_rl.quality.commands", "bench_quality_main"),
    ("audit", "verifiers"): ("awm_rl.commands_rollout", "audit_main"),
    ("eval", "bfcl"): ("awm_rl.bfcl.commands", "main"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="awm", description="Agent World Model: synthesize, serve and train on tool-use environments.",
                                epilog="Also: awm serve SCENARIO | awm quality [SCENARIO ...] | awm repair [SCENARIO ...] | awm bench serve | awm bench quality | awm rollout | awm audit verifiers | "
                                       "awm train --config FILE (each has --help).")
    p.add_argument("--home", default=None, help="artifact store root (default $AWM_HOME or <project>/.awm_home)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("import", help="import a folder of AWM JSONL files into the store and Dagster")
    s.add_argument("dir")
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-dagster", action="store_true", help="only fill the store; register no partitions")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("export", help="write the store back as AWM JSONL files")
    s.add_argument("dir")
    s.add_argument("--scenarios", nargs="*")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("catalog", help="list scenarios with statistics and readiness")
    s.add_argument("--json", action="store_true")
    s.add_argument("--ready", action="store_true", help="only ready environments")
    s.add_argument("--refresh", action="store_true", help="first run the quality gate and rebuild catalog.json "
                                                          "(the refresh_catalog job; what training reads)")
    s.set_defaults(func=cmd_catalog)

    s = sub.add_parser("synth", help="synthesize a seed batch headlessly (same assets as the UI)")
    s.add_argument("--seed-batch", required=True, help="seed file (.jsonl or .txt)")
    s.add_argument("--workers", type=int, default=2, help="scenarios synthesized in parallel")
    s.add_argument("--all", action="store_true", help="re-synthesize the batch's existing scenarios too")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_synth)
    s = sub.add_parser("repair", help="repair stored environments with the configured LLM (broken tools, verifiers, "
                                      "missing reference solutions); runs the repair_environment job")
    s.add_argument("scenarios", nargs="*", help="default: every stored scenario with env code")
    s.add_argument("--attempts", type=int, default=3, help="LLM attempts per phase after the stored artifact")
    s.add_argument("--phases", nargs="+", default=["env_code", "verifiers", "solutions"],
                   choices=["env_code", "verifiers", "solutions"])
    s.add_argument("--tasks", nargs="*", type=int, help="limit verifier and solution repair to these task indices")
    s.add_argument("--no-dagster", action="store_true", help="run on an ephemeral Dagster instance (not shown in the UI)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_repair)
    for name in ("serve", "rollout", "train", "quality", "bench", "audit"):
        sub.add_parser(name, help=f"see `awm {name} --help`", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    home = None
    if len(argv) >= 2 and argv[0] == "--home":
        home, argv = argv[1], argv[2:]
    if home:
        os.environ["AWM_HOME"] = str(Path(home).resolve())
    if argv and argv[0] in FORWARDED:
        return _forward(*FORWARDED[argv[0]], argv[1:])
    if len(argv) >= 2 and (argv[0], argv[1]) in FORWARDED_PAIRS:
        return _forward(*FORWARDED_PAIRS[(argv[0], argv[1])], argv[2:])
    if argv and argv[0] in ("bench", "audit"):
        print(f"awm {argv[0]}: say what to run: " + ", ".join(f"awm {a} {b}" for a, b in FORWARDED_PAIRS if a == argv[0]),
              file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    args.home = home
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
