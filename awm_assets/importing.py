"""`awm import`: the plain importer plus what Dagster needs to show imported environments like synthesized
ones: a partition per scenario and a materialization (with the importer's metadata) per present stage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from awm_resources.interop import ImportReport, import_awm_dir
from awm_resources.store import ArtifactStore

from awm_assets.instance import register_scenarios
from awm_assets.synthesis import previews
from awm_assets.ui_tables import records_table


def _metadata(store: ArtifactStore, key: str, stage: str, meta: dict, source: str) -> dict:
    out = {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}
    out["source"] = "imported"
    out["import_dir"] = dg.MetadataValue.path(source)
    if meta.get("failed_statements"):
        out["failed_statements"] = records_table(meta["failed_statements"], ["table", "index", "error", "statement"])
    try:
        out["preview"] = dg.MetadataValue.md(previews.preview(store, key, stage))
    except (KeyError, FileNotFoundError, ValueError):
        pass
    return out


def import_into_dagster(src: Path, store: ArtifactStore, instance: dg.DagsterInstance | None,
                        progress: Callable[[str, int], None] | None = None, *, replace: bool = False) -> ImportReport:
    report = import_awm_dir(src, store, progress, replace=replace)
    if instance is None:
        return report
    written = [k for k, s in report.scenarios.items() if s.written]
    register_scenarios(instance, written)
    for key in written:
        for stage, meta in report.scenarios[key].stages.items():
            if stage == "scenario":
                continue
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=stage, partition=key, description=f"imported from {report.source}",
                metadata=_metadata(store, key, stage, meta, report.source)))
    return report
