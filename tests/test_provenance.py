"""Provenance: environment versions (content digests), catalog versions kept in the store, a run pinned to one
(`awm train --catalog-version`) refused with the list of what changed, and the catalog's Dagster data version."""

from __future__ import annotations

import json
import shutil

import pytest

from awm_resources.provenance import (
    CatalogVersionError,
    catalog_digest,
    catalog_version_path,
    changed_environments,
    describe_catalog_versions,
    environment_digest,
    list_catalog_versions,
    run_provenance,
    save_catalog_version,
    verify_catalog_version,
)
from awm_resources.store import ArtifactStore


def _environment(store: ArtifactStore, key: str, code: str = "app = None\n") -> None:
    store.write_json(key, "scenario.json", {"name": key})
    store.write_text(key, "server.py", code)
    store.write_json(key, "tasks.json", {"tasks": ["list the items"]})
    store.write_json(key, "verifiers.json", {"verifiers": [{"task_idx": 0, "code": "def verify_task_completion(): ..."}]})
    store.path(key, "initial.db").write_bytes(b"SQLite format 3\x00" + key.encode())


def _entries(store: ArtifactStore, keys: list[str], excluded: dict[str, list[int]] | None = None) -> list[dict]:
    """Ready catalog entries as catalog_entry writes them (the version is the gate's content digest)."""
    return [{"name": k, "ready": True, "tasks": 1, "excluded_tasks": (excluded or {}).get(k, []),
             "trainable_tasks": 1, "digest": environment_digest(store, k)} for k in keys]


@pytest.fixture
def store(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    for key in ("alpha", "beta", "gamma"):
        _environment(store, key)
    return store


def test_environment_version_follows_its_content(store):
    first = environment_digest(store, "alpha")
    assert first == environment_digest(store, "alpha") and first != environment_digest(store, "beta")
    store.write_text("alpha", "server.py", "app = None\n")  # rewritten, same bytes: same version
    assert environment_digest(store, "alpha") == first
    store.write_json("alpha", "tasks.json", {"tasks": ["list the items", "delete one"]})
    second = environment_digest(store, "alpha")
    assert second != first
    store.path("alpha", "initial.db").write_bytes(b"SQLite format 3\x00other rows")
    assert environment_digest(store, "alpha") not in (first, second)


def test_catalog_digest_covers_versions_and_left_out_tasks_not_order(store):
    entries = _entries(store, ["alpha", "beta"])
    assert catalog_digest(entries) == catalog_digest(list(reversed(entries)))
    assert catalog_digest(entries) != catalog_digest(_entries(store, ["alpha", "beta"], {"beta": [0]}))
    assert catalog_digest(entries) != catalog_digest(_entries(store, ["alpha"]))
    assert catalog_digest(entries) != catalog_digest([{**entries[0], "digest": "0" * 16}, entries[1]])


def test_catalog_versions_are_kept_once_and_found_by_prefix(store):
    digest, path = save_catalog_version(store, _entries(store, ["alpha", "beta"]))
    written = path.stat().st_mtime_ns
    assert save_catalog_version(store, _entries(store, ["beta", "alpha"])) == (digest, path)
    assert path.stat().st_mtime_ns == written  # the same version is not written again
    other, _ = save_catalog_version(store, _entries(store, ["alpha", "beta", "gamma"]))
    assert set(list_catalog_versions(store)) == {digest, other}
    assert catalog_version_path(store, digest) == path == catalog_version_path(store, digest[:6])
    with pytest.raises(CatalogVersionError, match=f"no catalog version 'feedface'.*{digest}"):
        catalog_version_path(store, "feedface")
    with pytest.raises(CatalogVersionError, match="no catalog version"):
        catalog_version_path(store, digest[:3])  # too short to name one
    doc = json.loads(path.read_text())
    assert doc["digest"] == digest and [e["name"] for e in doc["environments"]] == ["alpha", "beta"]


def test_kept_versions_are_listed_with_what_changed_vs_the_current_catalog(store, monkeypatch):
    """`awm catalog --versions`: newest first, the current one marked, an older one with each environment whose
    version differs from the current catalog's (repaired, added), an unreadable file named with its problem."""
    import os

    from typer.testing import CliRunner

    from awm_assets.cli import app

    old_entries = _entries(store, ["alpha", "beta"], {"beta": [0]})
    old, old_path = save_catalog_version(store, old_entries)
    os.utime(old_path, (1_000_000, 1_000_000))  # older than the next one, whatever the clock's resolution
    store.write_text("alpha", "server.py", "app = 'repaired'\n")
    entries = _entries(store, ["alpha", "beta", "gamma"])
    new, _ = save_catalog_version(store, entries)
    store.catalog_path.write_text(json.dumps({"digest": new, "environments": entries}))
    broken = store.root / "catalog_versions" / "0badf11e0badf11e.json"
    broken.write_text('{"environments": "all"}')
    os.utime(broken, (1, 1))
    first, second, third = describe_catalog_versions(store)
    assert (first["digest"], first["current"], first["changed_vs_current"]) == (new, True, [])
    assert first["environments"] == 3 and first["trainable_tasks"] == 3 and first["kept_at"].endswith("Z")
    assert second["digest"] == old and not second["current"] and second["trainable_tasks"] == 1
    assert second["changed_vs_current"] == [
        {"environment": "alpha", "version": old_entries[0]["digest"], "current": entries[0]["digest"]},
        {"environment": "gamma", "version": None, "current": entries[2]["digest"]}]
    assert third["digest"] == "0badf11e0badf11e" and "environments" in third["problem"]

    monkeypatch.setenv("AWM_HOME", str(store.root))
    out = CliRunner().invoke(app, ["catalog", "--versions"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith(f"{new}  ") and lines[0].endswith("3 environments, 3 tasks  current")
    assert f"alpha ({old_entries[0]['digest']} -> {entries[0]['digest']}), gamma (absent -> " in lines[1]
    assert lines[2].startswith("0badf11e0badf11e  unreadable:")
    as_json = CliRunner().invoke(app, ["catalog", "--versions", "--json"])
    assert [v["digest"] for v in json.loads(as_json.output)] == [new, old, "0badf11e0badf11e"]
    refused = CliRunner().invoke(app, ["catalog", "--versions", "--ready"])
    assert refused.exit_code == 2 and "--ready does not apply to --versions" in refused.output
    store.catalog_path.unlink()  # before any catalog.json: nothing to compare with
    assert describe_catalog_versions(store)[0]["changed_vs_current"] is None


def test_a_pinned_version_is_refused_with_every_change(store):
    entries = _entries(store, ["alpha", "beta", "gamma"])
    digest, path = save_catalog_version(store, entries)
    assert verify_catalog_version(store, digest) == path  # nothing changed: that set, exactly
    old = {e["name"]: e["digest"] for e in entries}
    store.write_text("alpha", "server.py", "app = 'repaired'\n")  # a repair
    shutil.rmtree(store.scenario_dir("gamma"))  # removed
    new_alpha = environment_digest(store, "alpha")
    assert [str(c) for c in changed_environments(store, old)] == [f"alpha: {old['alpha']} -> {new_alpha}",
                                                                   f"gamma: {old['gamma']} -> missing"]
    with pytest.raises(CatalogVersionError) as err:
        verify_catalog_version(store, digest[:8])
    message = str(err.value)
    assert f"catalog version {digest}: 2 of the 3 environment(s)" in message
    assert f"alpha: {old['alpha']} -> {new_alpha}" in message and f"gamma: {old['gamma']} -> missing" in message
    assert "beta" not in message
    assert verify_catalog_version(store, digest, ["beta"]) == path  # a run on beta alone still gets it exactly


def test_run_provenance_names_the_catalog_and_every_version_now(store):
    entries = _entries(store, ["alpha", "beta"])
    store.write_text("beta", "server.py", "app = 'changed after the refresh'\n")
    prov = run_provenance(store, ["beta", "alpha"], entries)
    assert prov["catalog_digest"] == catalog_digest(entries)
    assert prov["environments"] == {"alpha": entries[0]["digest"], "beta": environment_digest(store, "beta")}
    assert prov["changed_since_catalog"] == [f"beta: {entries[1]['digest']} -> {prov['environments']['beta']}"]
    assert run_provenance(store, ["alpha"], None)["catalog_digest"] is None


def test_catalog_asset_versions_the_catalog_and_train_refuses_a_changed_one(demo_pristine, tmp_path, capsys):
    """The environment_catalog run on the synthesized demo: its data version is the catalog digest, kept as a
    version file whose entries carry each environment's version; `awm train --catalog-version` on a copy where one
    environment was repaired since fails before training, naming it."""
    import dagster as dg

    from awm_assets.defs.catalog.catalog_asset import environment_catalog
    from awm_resources.documents import Catalog, read
    from awm_rl.training.commands import train_main
    from tests.test_synthesis import resources

    root = tmp_path / "demo"
    shutil.copytree(demo_pristine, root)
    (root / "catalog.json").unlink()
    result = dg.materialize([environment_catalog], instance=dg.DagsterInstance.ephemeral(), resources=resources(root))
    [mat] = result.asset_materializations_for_node("environment_catalog")
    catalog = json.loads((root / "catalog.json").read_text())
    digest = catalog["digest"]
    assert mat.tags["dagster/data_version"] == mat.metadata["catalog_digest"].value == digest
    assert digest == catalog_digest(catalog["environments"])
    pristine = ArtifactStore(root)
    kept = read(Catalog, catalog_version_path(pristine, digest))
    versions = {e.name: e.digest for e in kept.environments}
    assert versions == {e["name"]: e["digest"] for e in catalog["environments"]}
    assert versions == {k: environment_digest(pristine, k) for k in versions} and len(versions) == 3
    assert {r.data["environment"]: r.data["version"] for r in mat.metadata["environment_versions"].value.records} == versions

    copy = ArtifactStore(tmp_path / "store")
    shutil.copytree(root, copy.root)
    server = copy.path("music_playlists", "server.py")
    server.write_text(server.read_text() + "\n# repaired\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"name: pinned\nmodel: {{tiny: true}}\nenvironments: {{store_root: '{copy.root}'}}\n"
                      "grpo: {steps: 1, group_size: 2, tasks_per_step: 1, mini_batch_tasks: 1}\n")
    assert train_main(["--config", str(config), "--catalog-version", digest[:8], "--in-process"]) == 1
    err = capsys.readouterr().err
    assert f"music_playlists: {versions['music_playlists']} -> {environment_digest(copy, 'music_playlists')}" in err
    assert "issue_tracker" not in err and not (copy.root / "training" / "pinned" / "summary.json").exists()


def test_grpo_training_run_config_pins_a_catalog_version(tmp_path):
    from awm_assets.defs.training.training_asset import TrainingRunConfig, _load

    cfg = _load(TrainingRunConfig(catalog_version="3257b3cc"), tmp_path, "run00000")
    assert cfg.environments.catalog_version == "3257b3cc" and cfg.environments.catalog is None
    assert _load(TrainingRunConfig(), tmp_path, "run00000").environments.catalog_version is None
