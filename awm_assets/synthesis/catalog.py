"""The environment catalog: one entry per scenario in the store, with readiness. The RL side reads only this."""

from __future__ import annotations

import json
from typing import Any

from awm_assets.synthesis.catalog_entry import catalog_entry
from awm_resources.documents import CATALOG_FILE
from awm_resources.store import ArtifactStore

QUALITY_SUMMARY_FILE = "quality_summary.json"  # written by the environment_quality asset
STATISTICS_FILE = "synthesis_statistics.json"  # written by the synthesis_statistics asset


def assemble_catalog(store: ArtifactStore, judge: Any | None = None,
                     refresh_id: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the catalog group builds: the quality gate's report over the complete scenarios (each result
    without its per-tool detail, which stays in the scenario's quality.json) and every entry. Incremental:
    only scenarios whose files changed since the last refresh are read again and, if complete, run through
    the gate (`catalog_index.refresh_index`; one snapshot per `refresh_id`); the entries equal
    `build_catalog`'s."""
    from awm_assets.synthesis.catalog_index import refresh_index
    from awm_rl.quality.results import summarize_batch

    snapshots = refresh_index(store, judge, refresh_id)
    results = [s["quality"] for s in snapshots.values() if s["complete"]]
    return {"scenarios": results, "totals": summarize_batch(results)}, [s["entry"] for s in snapshots.values()]


def build_catalog(store: ArtifactStore, quality_results: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every scenario's entry; `quality_results` (scenario -> result of the quality gate just run) saves
    reading each `quality.json` again."""
    results = quality_results or {}
    return [catalog_entry(store, key, results.get(key)) for key in store.list_scenarios()]


def written_catalog(store: ArtifactStore) -> list[dict[str, Any]]:
    """The entries `environment_catalog` last wrote (ready or not), in `build_catalog`'s order: after a
    refresh they are the store's entries, without reading every scenario again."""
    data = json.loads((store.root / CATALOG_FILE).read_text(encoding="utf-8"))
    return sorted(data["environments"] + data["not_ready"], key=lambda e: e["name"])


def catalog_up_to_date(store: ArtifactStore) -> bool:
    """Whether a refresh would write the catalog group's files again as they are: each was written from the
    store as it is now (`catalog_index.catalog_current`), the quality summary with the judge configured now.
    `awm catalog --refresh` then starts no run."""
    from awm_assets.synthesis.catalog_index import catalog_current
    from awm_resources.llm import REPLAY_MODEL
    from awm_resources.settings import judge_llm_config

    model = judge_llm_config().model
    judge = None if model in (None, "", REPLAY_MODEL) else f"sql:{model}"  # the gate's judge (gate_judge)
    return catalog_current(store, {QUALITY_SUMMARY_FILE: judge, CATALOG_FILE: None, STATISTICS_FILE: None})
