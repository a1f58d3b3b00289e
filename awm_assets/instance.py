"""The Dagster instance the CLI and `make` targets share: `$DAGSTER_HOME`, default `<project>/.dagster_home`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg

from awm_resources.store import PROJECT_ROOT


def ensure_dagster_home() -> Path:
    """Point DAGSTER_HOME at the project-local folder (unless set) holding the project's dagster.yaml."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / ".dagster_home"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    src, dst = PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml"
    if src.is_file() and (not dst.is_file() or dst.read_bytes() != src.read_bytes()):
        shutil.copyfile(src, dst)
    return home


def get_instance() -> dg.DagsterInstance:
    ensure_dagster_home()
    return dg.DagsterInstance.get()


def register_scenarios(instance: dg.DagsterInstance, keys: list[str]) -> list[str]:
    """Add scenario partitions that do not exist yet; returns the new ones."""
    from awm_assets.partitions import scenario_partitions

    new = [k for k in keys if not instance.has_dynamic_partition(scenario_partitions.name, k)]
    if new:
        instance.add_dynamic_partitions(scenario_partitions.name, new)
    return new
