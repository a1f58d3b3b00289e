"""The Dagster instance the CLI and `make` targets share: `$DAGSTER_HOME`, default `<project>/.dagster_home`."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import dagster as dg

from awm_assets.defs.shared.partitions import scenario_partitions
from awm_resources.settings import load_settings
from awm_resources.store import PROJECT_ROOT


def instance_config() -> Path:
    """The instance config to install: `AWM_DAGSTER_YAML` (relative to the project), default dagster.yaml."""
    chosen = load_settings().paths.dagster_yaml
    path = PROJECT_ROOT / (chosen or "dagster.yaml")  # an absolute `chosen` stays as it is
    if chosen and not path.is_file():
        raise FileNotFoundError(f"AWM_DAGSTER_YAML names {path}, which is not a file (the Dagster instance config, "
                                "e.g. dagster.yaml or dagster.cluster.yaml)")
    return path


def ensure_dagster_home() -> Path:
    """Point DAGSTER_HOME at the project-local folder (unless set) holding the project's instance config
    (`instance_config()`), so the commands and the UI read the same instance."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / ".dagster_home"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    src, dst = instance_config(), home / "dagster.yaml"
    if src.is_file() and (not dst.is_file() or dst.read_bytes() != src.read_bytes()):
        shutil.copyfile(src, dst)
    return home


def get_instance() -> dg.DagsterInstance:
    ensure_dagster_home()
    return dg.DagsterInstance.get()


def register_scenarios(instance: dg.DagsterInstance, keys: list[str]) -> list[str]:
    """Add scenario partitions that do not exist yet (one query, one insert); returns the new ones."""
    existing = instance.get_existing_dynamic_partitions(scenario_partitions.name, keys) if keys else set()
    new = list(dict.fromkeys(k for k in keys if k not in existing))
    if new:
        instance.add_dynamic_partitions(scenario_partitions.name, new)
    return new


def report_materializations(instance: dg.DagsterInstance, materializations: list[dg.AssetMaterialization]) -> None:
    """Record runless materializations as `instance.report_runless_asset_event` does, many at once.

    Why: Dagster's SQLite event log stores each event with its own engine, connection and fsync'd
    transaction in two shards, serializing it twice (~20 ms an event: two minutes for the 6,000
    materializations of an AWM-1K import). Here the same rows go in with one transaction per shard,
    each event serialized once and each asset's latest-materialization row written once. Other
    storages (Postgres, the in-memory one) take the events one by one, as before."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    storage = instance.event_log_storage
    if type(storage) is not SqliteEventLogStorage:
        for materialization in materializations:
            instance.report_runless_asset_event(materialization)
        return
    from dagster._core.instance.utils import RUNLESS_RUN_ID
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as events_table

    entries = [_runless_entry(m) for m in materializations]
    rows = [storage._event_to_row(entry) for entry in entries]
    if not rows:
        return
    with storage.run_connection(RUNLESS_RUN_ID) as conn:  # the run shard of runless events
        conn.execute(events_table.insert(), rows)
    with storage.index_transaction() as conn:  # the cross-run index the UI's asset pages read
        ids = conn.execute(events_table.insert().returning(events_table.c.id, sort_by_parameter_order=True),
                           rows).scalars().all()
        storage._store_asset_event_tags(conn, entries, ids)
        latest = {entry.dagster_event.asset_key: (entry, event_id)
                  for entry, event_id in zip(entries, ids, strict=True)}
        for entry, event_id in latest.values():
            storage._store_asset_event(conn, entry, event_id)


def _runless_entry(materialization: dg.AssetMaterialization):
    """The event log entry `report_runless_asset_event` builds for a materialization."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID
    from dagster._time import get_current_timestamp

    event = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
                         event_specific_data=StepMaterializationData(materialization), job_name=RUNLESS_JOB_NAME)
    return EventLogEntry(user_message="", level=logging.INFO, job_name=RUNLESS_JOB_NAME, run_id=RUNLESS_RUN_ID,
                         error_info=None, timestamp=get_current_timestamp(), step_key=event.step_key,
                         dagster_event=event)
