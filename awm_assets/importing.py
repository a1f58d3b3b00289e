"""`awm import`: the plain importer plus what Dagster needs to show imported environments like synthesized
ones: a partition per scenario and a materialization (with the importer's metadata) per present stage; and
the quality gate on a few imported scenarios right away (`check_imported`)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg

from awm_assets.defs.shared.ui_tables import records_table
from awm_assets.instance import register_scenarios, report_materializations
from awm_assets.synthesis import previews
from awm_resources.interop import ImportReport, import_awm_dir
from awm_resources.store import STAGES, ArtifactStore

# An import of at most this many complete scenarios runs the quality gate on them before it returns (each
# unseen environment takes seconds: a few are worth waiting for, a folder of them is the refresh's work).
CHECK_AT_IMPORT_MAX = 4


def _metadata(store: ArtifactStore, key: str, stage: str, meta: dict, source: str) -> dict:
    out = {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}
    out["source"] = "imported"
    out["import_dir"] = dg.MetadataValue.path(source)
    if meta.get("failed_statements"):
        out["failed_statements"] = records_table(meta["failed_statements"], ["table", "index", "error", "statement"])
    try:
        out["preview"] = dg.MetadataValue.md(previews.preview(store, key, stage, full=False))
    except (KeyError, FileNotFoundError, ValueError):
        pass
    return out


def import_into_dagster(src: Path, store: ArtifactStore, instance: dg.DagsterInstance | None,
                        progress: Callable[[str, int], None] | None = None, *, replace: bool = False) -> ImportReport:
    """The store import, and for each chunk of scenarios it swaps in, their partitions and one materialization
    per stage, written by a background thread while the next chunk builds (events cost more than builds)."""
    if instance is None:
        return import_awm_dir(src, store, progress, replace=replace)

    def write_events(keys: list[str], report: ImportReport) -> None:
        register_scenarios(instance, keys)
        report_materializations(instance, [  # a chunk's events together: one transaction per shard
            dg.AssetMaterialization(asset_key=stage, partition=key, description=f"imported from {report.source}",
                                    metadata=_metadata(store, key, stage, meta, report.source))
            for key in keys for stage, meta in report.scenarios[key].stages.items() if stage != "scenario"])

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dagster-events") as writer:
        pending = []

        def on_committed(keys: list[str], report: ImportReport) -> None:
            pending.append(writer.submit(write_events, list(keys), report))

        report = import_awm_dir(src, store, progress, replace=replace, on_committed=on_committed)
        for future in pending:
            future.result()  # an event that could not be written fails the import loudly, after the store
    return report


def check_imported(store: ArtifactStore, report: ImportReport, limit: int = CHECK_AT_IMPORT_MAX) -> list[dict] | None:
    """The quality gate's results for the complete scenarios the import wrote ([] if none), or None when it
    leaves them to `awm catalog --refresh`: more than `limit` of them (an AWM-1K import stays an import; the
    refresh checks them in one go, reusing results by content) or a judge model configured (judged results
    come from the refresh, which has the judge). Why here: whoever imports a few scenarios waits for them
    anyway, and `awm import` then refreshes the catalog in the same process (Dagster loaded once)."""
    from awm_resources.llm import REPLAY_MODEL
    from awm_resources.settings import judge_llm_config

    keys = [k for k, s in report.scenarios.items() if s.written and set(STAGES) <= set(store.present_stages(k))]
    if not keys:
        return []
    if len(keys) > limit or judge_llm_config().model not in (None, "", REPLAY_MODEL):
        return None
    from awm_rl.quality.gate import quality

    return quality(store, keys)["scenarios"]
