"""`awm bench scale --scenarios N --json`: the store and the catalog at AWM-1K size.

N scenarios are made from the corpus's environments under new names (`... copy i`), then measured: the
import into a fresh store (seconds, per scenario, peak memory of the process), the Dagster side of the
import (partitions and one materialization per stage: seconds and event count), the catalog over all of
them (the quality gate reuses results by content digest, so copies of one environment are checked once),
and the catalog after one more scenario. Ratios compare with the corpus itself imported in the same run
(the per-scenario baseline) and with the full catalog.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awm_resources.names import normalize_scenario_name
from awm_resources.store import PIPELINE_STAGES, PROJECT_ROOT

DEFAULT_CORPUS = PROJECT_ROOT.parent / "shared" / "awm-corpus" / "generated"


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


def run(n: int, corpus: Path, workers: int | None = None) -> dict[str, Any]:
    import dagster as dg

    from awm_assets.importing import import_into_dagster
    from awm_resources.interop import import_awm_dir
    from awm_resources.store import ArtifactStore

    with tempfile.TemporaryDirectory(prefix="awm-bench-scale-") as tmp:
        root = Path(tmp)
        # Baseline: the corpus itself, into its own store.
        started = time.perf_counter()
        base_report = import_awm_dir(corpus, ArtifactStore(root / "baseline"), workers=1)
        base_s = time.perf_counter() - started
        base_n = len(base_report.scenarios)

        made = time.perf_counter()
        make_copies(corpus, root / "src", n)
        make_s = time.perf_counter() - made
        store = ArtifactStore(root / "store")
        started = time.perf_counter()
        report = import_awm_dir(root / "src", store, workers=workers)
        import_s = time.perf_counter() - started
        rss = _peak_rss_mb()

        instance = dg.DagsterInstance.ephemeral(tempdir=str(root / "dagster"))
        started = time.perf_counter()
        import_into_dagster(root / "src", store, instance, replace=True)  # the store part again, plus Dagster
        dagster_s = time.perf_counter() - started - import_s
        events = sum(len(instance.fetch_materializations(dg.AssetKey(stage), limit=10_000).records)
                     for stage in PIPELINE_STAGES)

        full_s, ready = _catalog_seconds(store)
        make_copies(corpus, root / "one_more", 1, start=n)
        started = time.perf_counter()
        import_awm_dir(root / "one_more", store, workers=1)
        one_import_s = time.perf_counter() - started
        one_catalog_s, ready_after = _catalog_seconds(store)
        instance.dispose()
        shutil.rmtree(root, ignore_errors=True)
    per_base = base_s / max(base_n, 1)
    per = import_s / max(len(report.scenarios), 1)
    return {
        "scenarios": n, "imported": len(report.scenarios), "issues": len(report.issues),
        "baseline": {"scenarios": base_n, "import_s": round(base_s, 3), "per_scenario_s": round(per_base, 4)},
        "make_source_s": round(make_s, 2),
        "import_s": round(import_s, 2), "import_per_scenario_s": round(per, 4),
        "import_per_scenario_vs_baseline": round(per / per_base, 3) if per_base else None,
        "peak_rss_mb": rss,
        "dagster_events": events, "dagster_s": round(dagster_s, 2),
        "catalog_full_s": round(full_s, 2), "ready": ready,
        "one_more_import_s": round(one_import_s, 2), "catalog_after_one_more_s": round(one_catalog_s, 2),
        "catalog_after_one_more_vs_full": round(one_catalog_s / full_s, 3) if full_s else None,
        "ready_after_one_more": ready_after,
        "targets": {"import_1000_s": 60, "catalog_after_one_more_s": 2},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="awm bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", type=int, default=200, help="scenarios to build from the corpus (AWM-1K: 1000)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="an AWM folder to copy (default: the corpus)")
    p.add_argument("--workers", type=int, default=None, help="import build processes (default: up to 4)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not (args.corpus / "gen_scenario.jsonl").is_file():
        print(f"awm bench scale: {args.corpus} is not an AWM folder with gen_scenario.jsonl", file=sys.stderr)
        return 2
    if args.scenarios < 1:
        print("awm bench scale: --scenarios must be at least 1", file=sys.stderr)
        return 2
    out = run(args.scenarios, args.corpus, args.workers)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
