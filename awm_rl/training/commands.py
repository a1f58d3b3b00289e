"""`awm train --config FILE [--steps N] [--output DIR] [--catalog-version DIGEST] [--json]`: a GRPO run on the Ray
cluster."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="awm train", description="GRPO training on the environment catalog, on Ray "
                                "(the cluster at $RAY_ADDRESS, else a local one).")
    p.add_argument("--config", required=True, help="YAML training config (e.g. configs/tiny-cpu.yaml)")
    p.add_argument("--steps", type=int, default=None, help="override grpo.steps")
    p.add_argument("--output", default=None, help="override output_dir")
    p.add_argument("--scenarios", nargs="*", default=None, help="override environments.scenarios")
    p.add_argument("--catalog-version", default=None, metavar="DIGEST",
                   help="train on this kept catalog version (catalog_digest of an earlier run's summary.json, or the "
                        "environment_catalog data version; a unique prefix will do) instead of catalog.json; fails, "
                        "listing what changed, when one of its environments was repaired, re-imported or removed since")
    p.add_argument("--model", default=None, help="override model.path (a model folder or hub id)")
    p.add_argument("--in-process", action="store_true", help="run the trainer in this process, not a Ray actor")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (progress on stderr)")
    return p


def _printer(stream: Any, bar: Any = None):
    """Event lines (above the step bar when stderr is a terminal), the bar advanced per RL step."""
    from awm_resources.progress import STDERR

    t0 = time.time()

    def on_event(event: dict[str, Any]) -> None:
        line = f"[{time.time() - t0:7.1f}s] {event.get('message', event)}"
        record = event.get("record") if event.get("kind") == "step" else None
        if bar is not None and STDERR.is_terminal:
            bar.log(line)
        else:
            print(line, file=stream, flush=True)
        if bar is not None and record:
            bar(f"reward {record.get('reward_mean', 0):+.3f}", total=record.get("steps"))
    return on_event


def train_main(argv: list[str]) -> int:
    from awm_rl.training.config import ConfigError, load_config
    from awm_rl.training.job import TrainingError
    from awm_rl.training.launcher import launch_training

    args = build_parser().parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.steps is not None:
        overrides["grpo"] = {"steps": args.steps}
    if args.output:
        overrides["output_dir"] = args.output
    if args.scenarios:
        overrides["environments"] = {"scenarios": args.scenarios, "if_not_ready": "error"}  # named here: strict
    if args.catalog_version:
        overrides.setdefault("environments", {}).update({"catalog_version": args.catalog_version, "catalog": None})
    if args.model:
        overrides["model"] = {"path": args.model, "tiny": False}
    if args.in_process:
        overrides["ray"] = {"in_process": True}
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"awm train: {exc}", file=sys.stderr)
        return 2
    try:
        from awm_resources.progress import progress_bar

        with progress_bar("training steps", config.grpo.steps) as bar:
            summary = launch_training(config, _printer(sys.stderr if args.json else sys.stdout, bar))
    except TrainingError as exc:
        print(f"awm train: {exc}", file=sys.stderr)
        return 1
    brief = {k: v for k, v in summary.items() if k != "config"}
    if args.json:
        print(json.dumps(brief, indent=2, ensure_ascii=False, default=str))
    else:
        last = summary.get("final_metrics") or {}
        print(f"trained {summary['steps']} step(s); final model {summary['final_model']}; metrics "
              f"{summary['metrics_file']}; reward {last.get('reward_mean', 0):+.3f}, completed "
              f"{last.get('completion_rate', 0):.0%}")
    from awm_rl.training.metrics import format_time_split

    print(format_time_split(summary.get("time_split") or {}), file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(train_main(sys.argv[1:]))
