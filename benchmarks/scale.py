"""`awm bench scale --scenarios N --json`: the store and the catalog at AWM-1K size.

N scenarios are made from the corpus's environments under new names (`... copy i`), then measured twice:

- `commands`: what a user runs, each a fresh process timed from spawn to exit, on a fresh store and
  Dagster instance (their own AWM_HOME and DAGSTER_HOME): `awm import DIR` of the N copies, `awm catalog
  --refresh` over all of them, `awm import` of one more scenario (an import of at most 4 runs the quality
  gate on them and then the refresh_catalog job) and `awm catalog --refresh` after it (which finds every
  catalog file written from the store as it is and starts no run); then what the store and the instance
  hold, so the timings are of work really done (two refresh_catalog runs). The same commands on the corpus
  itself (5 scenarios) and `awm --help` (the CLI's start) in the same run are the baseline.
- the internal functions (the earlier figures): the store import, the Dagster side of the import
  (partitions and one materialization per stage, into an in-memory instance), the catalog over all of
  them and after one more scenario (`--no-internal` skips them: they check every environment again).

The quality gate reuses results by content digest, so copies of one environment are checked once
(copies whose initial database holds build-time timestamps differ by the second they were built in).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from awm_resources.names import normalize_scenario_name
from awm_resources.store import PIPELINE_STAGES, PROJECT_ROOT

DEFAULT_CORPUS = PROJECT_ROOT.parent / "shared" / "awm-corpus" / "generated"
# What `awm import DIR` of 1,000 scenarios and `awm catalog --refresh` after one more may take (2 cores).
TARGETS_AT_1000 = {"import_s": 30.0, "catalog_after_one_more_s": 3.0}
COMMAND_TIMEOUT_S = 3600


def make_copies(corpus: Path, dest: Path, n: int, start: int = 0,
                name_for: Callable[[str, int], str] = lambda base, i: f"{base} copy {i}") -> list[str]:
    """Write `n` scenarios built from the corpus's records under new names (`name_for(base name, i)`) into
    `dest`; returns their keys. Records that name their scenario by its key get the new key."""
    dest.mkdir(parents=True, exist_ok=True)
    names = sorted({json.loads(line)["name"] for line in (corpus / "gen_scenario.jsonl").read_text().splitlines()
                    if line.strip()})
    renamed = [(names[i % len(names)], name_for(names[i % len(names)], i)) for i in range(start, start + n)]
    for path in sorted(corpus.glob("*.jsonl")):
        field = "name" if path.name == "gen_scenario.jsonl" else "scenario"
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        with (dest / path.name).open("w") as out:
            for base, new in renamed:
                for r in records:
                    if normalize_scenario_name(r[field]) == normalize_scenario_name(base):
                        out.write(json.dumps({**r, field: new if r[field] == base else normalize_scenario_name(new)}) + "\n")
    return [normalize_scenario_name(new) for _, new in renamed]


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _catalog_seconds(store) -> tuple[float, int]:
    """What `environment_catalog` does: the quality gate where results are missing, then the entries."""
    from awm_assets.synthesis.catalog import assemble_catalog

    started = time.perf_counter()
    _, entries = assemble_catalog(store)
    return time.perf_counter() - started, sum(1 for e in entries if e["ready"])


def _awm() -> list[str]:
    """The `awm` a user runs: the console script beside this interpreter (else the module)."""
    script = Path(sys.executable).with_name("awm")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "awm_assets.cli"]


def _timed(args: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning `awm ARGS` to its exit; a failed command stops the bench, saying why."""
    started = time.perf_counter()
    out = subprocess.run([*_awm(), *args], env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"awm {' '.join(args)} exited with {out.returncode}: {out.stderr.strip()[-1500:]}")
    return round(seconds, 3)


@contextmanager
def _dagster_home(home: Path):
    """DAGSTER_HOME set to `home` while the block reads that instance (its dagster.yaml names it)."""
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved


def _held(awm_home: Path, dagster_home: Path) -> dict[str, Any]:
    """What the commands left: scenarios in the store and in catalog.json; partitions, materializations per
    stage and refresh_catalog runs in the Dagster instance."""
    import dagster as dg

    from awm_resources.store import ArtifactStore

    catalog = json.loads((awm_home / "catalog.json").read_text(encoding="utf-8"))
    with _dagster_home(dagster_home), dg.DagsterInstance.get() as instance:
        partitions = instance.get_dynamic_partitions("scenarios")
        limit = len(partitions) * 2 + 10
        materialized = {stage: len(instance.fetch_materializations(dg.AssetKey(stage), limit=limit).records)
                        for stage in PIPELINE_STAGES}
        runs = instance.get_run_records(dg.RunsFilter(job_name="refresh_catalog"))
        return {"store_scenarios": len(ArtifactStore(awm_home).list_scenarios()),
                "catalog_ready": len(catalog["environments"]), "catalog_not_ready": len(catalog["not_ready"]),
                "dagster_partitions": len(partitions), "dagster_materializations": materialized,
                "refresh_runs": sorted(r.dagster_run.status.value for r in runs)}


def run_commands(src: Path, one_more: Path, root: Path) -> dict[str, Any]:
    """The user's four commands, each a fresh process, against a fresh store and instance under `root`."""
    awm_home, dagster_home = root / "awm_home", root / "dagster_home"
    env = {**os.environ, "AWM_HOME": str(awm_home), "DAGSTER_HOME": str(dagster_home)}
    out = {"import_s": _timed(["import", str(src)], env),
           "catalog_refresh_s": _timed(["catalog", "--refresh"], env),
           "one_more_import_s": _timed(["import", str(one_more)], env),
           "catalog_after_one_more_s": _timed(["catalog", "--refresh"], env)}
    out["held"] = _held(awm_home, dagster_home)
    return out


def command_figures(n: int, corpus: Path, src: Path, one_more: Path, root: Path) -> dict[str, Any]:
    """The commands on the N copies and, as the baseline, on the corpus; the CLI's start; targets; ratios."""
    env = {**os.environ, "AWM_HOME": str(root / "help_home"), "DAGSTER_HOME": str(root / "help_dagster")}
    cli_start_s = min(_timed(["--help"], env) for _ in range(3))
    base = run_commands(corpus, one_more, root / "commands_baseline")
    at_n = run_commands(src, one_more, root / "commands")
    base_n = base["held"]["store_scenarios"] - 1

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    at_n["import_per_scenario_s"] = round(at_n["import_s"] / n, 4)
    targets = {name: {"target_s": limit, "measured_s": at_n[name], "met": at_n[name] <= limit if n == 1000 else None}
               for name, limit in TARGETS_AT_1000.items()}
    return {
        "cli_start_s": cli_start_s, "baseline": {**base, "scenarios": base_n}, "at_n": at_n,
        "targets_at_1000": targets,
        "ratios": {
            "import_per_scenario_vs_baseline": ratio(at_n["import_s"] / n, base["import_s"] / base_n),
            "catalog_after_one_more_vs_baseline": ratio(at_n["catalog_after_one_more_s"], base["catalog_after_one_more_s"]),
            "one_more_import_vs_baseline": ratio(at_n["one_more_import_s"], base["one_more_import_s"]),
            "catalog_after_one_more_vs_cli_start": ratio(at_n["catalog_after_one_more_s"], cli_start_s),
            "one_more_import_vs_cli_start": ratio(at_n["one_more_import_s"], cli_start_s),
        },
    }


def run(n: int, corpus: Path, workers: int | None = None, *, commands: bool = True,
        internal: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="awm-bench-scale-") as tmp:
        root = Path(tmp)
        made = time.perf_counter()
        make_copies(corpus, root / "src", n)
        make_s = time.perf_counter() - made
        make_copies(corpus, root / "one_more", 1, start=n)
        out = internal_figures(n, corpus, root / "src", root / "one_more", root / "internal", workers) if internal else {}
        out["make_source_s"] = round(make_s, 2)
        if commands:
            out["commands"] = command_figures(n, corpus, root / "src", root / "one_more", root)
        shutil.rmtree(root, ignore_errors=True)
    return out


def internal_figures(n: int, corpus: Path, src: Path, one_more: Path, root: Path,
                     workers: int | None) -> dict[str, Any]:
    """The import and catalog functions called in this process (no CLI, an in-memory Dagster instance)."""
    import dagster as dg

    from awm_assets.importing import import_into_dagster
    from awm_resources.interop import import_awm_dir
    from awm_resources.store import ArtifactStore

    # Baseline: the corpus itself, into its own store.
    started = time.perf_counter()
    base_report = import_awm_dir(corpus, ArtifactStore(root / "baseline"), workers=1)
    base_s = time.perf_counter() - started
    base_n = len(base_report.scenarios)

    store = ArtifactStore(root / "store")
    started = time.perf_counter()
    report = import_awm_dir(src, store, workers=workers)
    import_s = time.perf_counter() - started
    rss = _peak_rss_mb()

    instance = dg.DagsterInstance.ephemeral(tempdir=str(root / "dagster"))
    started = time.perf_counter()
    import_into_dagster(src, store, instance, replace=True)  # the store part again, plus Dagster
    dagster_s = time.perf_counter() - started - import_s
    events = sum(len(instance.fetch_materializations(dg.AssetKey(stage), limit=10_000).records)
                 for stage in PIPELINE_STAGES)

    full_s, ready = _catalog_seconds(store)
    started = time.perf_counter()
    import_awm_dir(one_more, store, workers=1)
    one_import_s = time.perf_counter() - started
    one_catalog_s, ready_after = _catalog_seconds(store)
    instance.dispose()
    per_base = base_s / max(base_n, 1)
    per = import_s / max(len(report.scenarios), 1)
    return {
        "scenarios": n, "imported": len(report.scenarios), "issues": len(report.issues),
        "baseline": {"scenarios": base_n, "import_s": round(base_s, 3), "per_scenario_s": round(per_base, 4)},
        "import_s": round(import_s, 2), "import_per_scenario_s": round(per, 4),
        "import_per_scenario_vs_baseline": round(per / per_base, 3) if per_base else None,
        "peak_rss_mb": rss,
        "dagster_events": events, "dagster_s": round(dagster_s, 2),
        "catalog_full_s": round(full_s, 2), "ready": ready,
        "one_more_import_s": round(one_import_s, 2), "catalog_after_one_more_s": round(one_catalog_s, 2),
        "catalog_after_one_more_vs_full": round(one_catalog_s / full_s, 3) if full_s else None,
        "ready_after_one_more": ready_after,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="awm bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", type=int, default=200, help="scenarios to build from the corpus (AWM-1K: 1000)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="an AWM folder to copy (default: the corpus)")
    p.add_argument("--workers", type=int, default=None, help="import build processes (default: up to 4)")
    p.add_argument("--no-commands", action="store_true",
                   help="only the internal figures (skip timing the awm commands as subprocesses)")
    p.add_argument("--no-internal", action="store_true",
                   help="only the commands (skip the internal functions, which check every environment once more)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not (args.corpus / "gen_scenario.jsonl").is_file():
        print(f"awm bench scale: {args.corpus} is not an AWM folder with gen_scenario.jsonl", file=sys.stderr)
        return 2
    if args.scenarios < 1:
        print("awm bench scale: --scenarios must be at least 1", file=sys.stderr)
        return 2
    if args.no_commands and args.no_internal:
        print("awm bench scale: --no-commands and --no-internal leave nothing to measure", file=sys.stderr)
        return 2
    out = run(args.scenarios, args.corpus, args.workers, commands=not args.no_commands, internal=not args.no_internal)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
