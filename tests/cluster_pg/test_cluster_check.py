"""The shared-store check (awm_resources/cluster_check.py) on the session's local Ray: every alive node runs it; a
path missing there is named with the node; a folder that is not the driver's is told apart by its marker."""

from __future__ import annotations

import sys

import pytest

from awm_resources.cluster_check import (
    MARKER_PREFIX,
    SharedPath,
    SharedStoreError,
    check_paths,
    check_shared_store,
    required_paths,
)
from awm_resources.store import PROJECT_ROOT


def test_every_alive_node_shares_the_paths(ray_address, tmp_path):
    import ray

    store, dagster_home = tmp_path / "store", tmp_path / "dagster_home"
    dagster_home.mkdir()
    paths = [SharedPath("the artifact store (AWM_HOME)", str(store), writable=True, marker=True),
             SharedPath("the Dagster instance (DAGSTER_HOME)", str(dagster_home), writable=True, marker=True),
             SharedPath("the project", str(PROJECT_ROOT)),
             SharedPath("the project's Python", sys.executable, executable=True)]
    report = check_shared_store(paths, timeout_s=120)
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(report["nodes"]) == len(alive) >= 1 and report["paths"] == [p.path for p in paths]
    assert store.is_dir()  # created by the driver, as the store would be
    assert not list(tmp_path.rglob(MARKER_PREFIX + "*"))  # markers and probes removed


def test_a_path_missing_on_a_node_is_named_with_the_node(ray_address, tmp_path):
    import ray

    missing = tmp_path / "not_on_this_node" / "venv" / "bin" / "python"
    paths = [SharedPath("the artifact store (AWM_HOME)", str(tmp_path / "store"), writable=True, marker=True),
             SharedPath("the project's Python (its virtual environment)", str(missing), executable=True)]
    with pytest.raises(SharedStoreError) as err:
        check_shared_store(paths, timeout_s=120)
    node = next(n for n in ray.nodes() if n["Alive"])
    message = str(err.value)
    assert f"node {node['NodeID'][:12]} ({node['NodeManagerAddress']}): the project's Python (its virtual " \
           f"environment) {missing} does not exist" in message, message
    assert "AWM_HOME" not in message  # the store was fine there


def test_a_local_folder_of_the_same_path_is_not_the_shared_one(tmp_path):
    """What a node reports when its folder exists but is not the driver's: the driver's marker is not in it."""
    folder = tmp_path / "awm_home"
    folder.mkdir()
    shared = SharedPath("the artifact store (AWM_HOME)", str(folder), writable=True, marker=True)
    assert check_paths([shared], "abc") == [f"the artifact store (AWM_HOME) {folder} is not the driver's: its "
                                            "marker file is not there (a local folder of the same path, not the "
                                            "shared one)"]
    (folder / (MARKER_PREFIX + "abc")).write_text("abc")
    assert check_paths([shared], "abc") == []


def test_required_paths_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AWM_HOME", str(tmp_path / "home"))
    with_instance = required_paths({"DAGSTER_HOME": str(tmp_path / "dh")})
    assert [(p.what, p.path) for p in with_instance[:2]] == [
        ("the artifact store (AWM_HOME)", str((tmp_path / "home").resolve())),
        ("the Dagster instance (DAGSTER_HOME)", str((tmp_path / "dh").resolve()))]
    assert [p.path for p in required_paths({})][1:] == [str(PROJECT_ROOT), sys.executable]
