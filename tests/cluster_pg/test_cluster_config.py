"""dagster.cluster.yaml and the switch that installs it; the instance it describes runs on a real PostgreSQL server
in tests/test_e2e_dagster_dev.py."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import PROJECT_ROOT

CLUSTER_YAML = PROJECT_ROOT / "dagster.cluster.yaml"


def test_cluster_yaml_is_dagster_yaml_with_postgres_storage():
    """The cluster config differs from the embedded one only in its storage (and H5's run launcher), and its
    connection is read from the environment, never written in the file."""
    embedded = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text())
    cluster = yaml.safe_load(CLUSTER_YAML.read_text())
    pg = cluster["storage"]["postgres"]["postgres_db"]
    assert {k: v for k, v in pg.items() if k != "scheme"} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"}}
    assert pg["scheme"] == "postgresql+psycopg2"  # the driver dagster-postgres installs
    rest = {k: v for k, v in cluster.items() if k not in ("storage", "run_launcher")}
    rest["run_monitoring"] = {k: v for k, v in rest["run_monitoring"].items() if k != "poll_interval_seconds"}
    assert rest == {k: v for k, v in embedded.items() if k != "storage"}


def test_awm_dagster_yaml_selects_the_instance_config(tmp_path, monkeypatch):
    from awm_assets.instance import ensure_dagster_home

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.setenv("AWM_DAGSTER_YAML", "dagster.cluster.yaml")
    assert (ensure_dagster_home() / "dagster.yaml").read_bytes() == CLUSTER_YAML.read_bytes()
    monkeypatch.setenv("AWM_DAGSTER_YAML", str(tmp_path / "missing.yaml"))
    with pytest.raises(FileNotFoundError, match=r"AWM_DAGSTER_YAML names .*missing\.yaml"):
        ensure_dagster_home()
    # the installed config is left as it was
    assert (tmp_path / "dh" / "dagster.yaml").read_bytes() == CLUSTER_YAML.read_bytes()


def test_ray_steps_get_the_postgres_connection(monkeypatch):
    """Every step of cluster mode opens the instance itself: the connection travels with it."""
    from awm_resources.settings import ray_forwarded_env

    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "secret")
    assert "DAGSTER_PG_PASSWORD" in ray_forwarded_env()
