"""AWM-format import/export on the real corpus in ../shared, and its bad-input handling."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import dagster as dg

from awm_resources.interop import export_awm_dir, import_awm_dir
from awm_resources.store import STAGES, ArtifactStore
from tests.conftest import GENERATED_SCENARIOS

# Per-scenario facts of ../shared/awm-corpus/generated (its README gives the ranges).
EXPECTED = {
    "doordash_drive_delivery_tracking": dict(tables=18, inserts=71, tools=21, loc=985),
    "etsy_digital_downloads": dict(tables=21, inserts=138, tools=18, loc=1072),
    "fortnite_item_shop": dict(tables=24, inserts=119, tools=11, loc=1026),
    "gofundme": dict(tables=12, inserts=60, tools=11, loc=824),
    "rover": dict(tables=19, inserts=79, tools=17, loc=1209),
}


def test_import_generated_corpus(corpus_dir, tmp_path):
    store = ArtifactStore(tmp_path)
    report = import_awm_dir(corpus_dir / "generated", store)
    assert sorted(report.scenarios) == GENERATED_SCENARIOS
    for key, exp in EXPECTED.items():
        s = report.scenarios[key]
        assert s.missing == [] and s.written
        assert s.stages["tasks"]["tasks"] == 10
        assert s.stages["db_schema"]["tables"] == exp["tables"] and s.stages["db_schema"]["tables_failed"] == 0
        assert s.stages["sample_data"]["inserts"] == exp["inserts"]
        assert s.stages["sample_data"]["error_rate"] <= 0.10
        assert s.stages["env_code"]["tools"] == exp["tools"] and s.stages["env_code"]["lines_of_code"] == exp["loc"]
        assert s.stages["verifiers"]["verifiers"] == 10
        assert store.present_stages(key) == list(STAGES)
        conn = sqlite3.connect(store.path(key, "initial.db"))
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
        conn.close()
        assert tables == exp["tables"]
    # The few failing inserts of the corpus are reported with file, line and scenario.
    failed = [i for i in report.issues if "insert" in i.problem]
    assert failed and all(i.file == "gen_sample.jsonl" and i.line and i.scenario for i in failed)
    assert report.scenarios["doordash_drive_delivery_tracking"].stages["sample_data"]["inserts_failed"] == 2


def test_import_partial_awm1k_sample(corpus_dir, tmp_path):
    store = ArtifactStore(tmp_path)
    report = import_awm_dir(corpus_dir / "awm1k-sample", store)
    cp = report.scenarios["content_platform_1"]
    assert cp.missing == ["verifiers"]
    assert cp.stages["env_code"]["tools"] == 34 and cp.stages["env_code"]["lines_of_code"] == 1814
    ec = report.scenarios["e_commerce_33"]
    assert ec.missing == ["env_code"] and ec.stages["verifiers"]["verifiers"] >= 1
    assert not store.has("e_commerce_33", "server.py")  # missing stays missing, never faked
    assert report.scenarios["code_hosting_2"].missing == ["sample_data", "api_spec", "env_code", "verifiers"]
    # Scenario-only records (no other file mentions them) are registered with just a description.
    assert report.scenarios["marketplace_1"].missing == ["tasks", "db_schema", "sample_data", "api_spec", "env_code", "verifiers"]
    no_desc = {i.scenario for i in report.issues if "no gen_scenario record" in i.problem}
    assert no_desc == {"content_platform_1", "e_commerce_33", "code_hosting_2"}


def test_export_then_reimport_is_lossless(corpus_dir, tmp_path):
    first = ArtifactStore(tmp_path / "a")
    import_awm_dir(corpus_dir / "generated", first)
    import_awm_dir(corpus_dir / "awm1k-sample", first)
    written = export_awm_dir(first, tmp_path / "out")
    assert written["gen_verifier.jsonl"] >= 50 and written["gen_envs.jsonl"] == 6
    second = ArtifactStore(tmp_path / "b")
    import_awm_dir(tmp_path / "out", second)
    assert first.list_scenarios() == second.list_scenarios()
    for key in first.list_scenarios():
        for name in ("tasks.json", "schema.json", "schema.sql", "sample.json", "sample.sql", "api_spec.json",
                     "server.py", "verifiers.json"):
            assert first.has(key, name) == second.has(key, name), (key, name)
            if first.has(key, name):
                assert first.read_text(key, name) == second.read_text(key, name), (key, name)
        a, b = first.read_json(key, "scenario.json"), second.read_json(key, "scenario.json")
        assert (a["name"], a["description"]) == (b["name"], b["description"])


def _write_jsonl(path: Path, rows: list) -> None:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


def test_bad_input_is_reported_and_the_rest_imported(tmp_path):
    src = tmp_path / "bad"
    src.mkdir()
    ddl_ok = {"name": "items", "ddl": "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)", "indexes": []}
    ddl_bad = {"name": "broken", "ddl": "CREATE TABLE broken (id INTEGER PRIMARY KEY,)", "indexes": []}
    _write_jsonl(src / "gen_scenario.jsonl", [{"name": "Shop", "description": "A shop."}, '{"name": "Half', {"nom": "x"}])
    _write_jsonl(src / "gen_tasks.jsonl", [{"scenario": "Shop", "tasks": ["t0", "t1"]},
                                           {"scenario": "Shop", "tasks": ["dup"]},
                                           {"scenario": "Only Tasks", "tasks": ["a"]}])
    _write_jsonl(src / "gen_db.jsonl", [{"scenario": "Shop", "db_schema": {"tables": [ddl_ok, ddl_bad]}}])
    _write_jsonl(src / "gen_sample.jsonl", [{"scenario": "Shop", "sample_data": {"tables": [{"table_name": "items", "insert_statements": [
        "INSERT INTO items VALUES (1, 'a')", "INSERT INTO items VALUES (1, 'again')", "INSERT INTO items (id) VALUES (2)"]}]}}])
    code = "def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n    return {'result': 'others'}\n"
    _write_jsonl(src / "gen_verifier.pure_code.jsonl", [
        {"scenario": "shop", "task_idx": 0, "task": "t0", "verification": {"code": None}},
        {"scenario": "shop", "task_idx": 1, "task": "t1", "verification": {"code": code}},
        {"scenario": "shop", "task_idx": 1, "task": "t1", "verification": {"code": code + "# second"}},
    ])
    store = ArtifactStore(tmp_path / "store")
    report = import_awm_dir(src, store)
    problems = [(i.file, i.line, i.scenario, i.problem) for i in report.issues]

    def has(file, line, text):
        return any(f == file and ln == line and text in p for f, ln, _, p in problems)

    assert has("gen_scenario.jsonl", 2, "malformed JSON")
    assert has("gen_scenario.jsonl", 3, "no string 'name'")
    assert has("gen_tasks.jsonl", 2, "duplicate record")
    assert has("gen_db.jsonl", 1, "ddl #0 for table broken failed")
    assert has("gen_sample.jsonl", 1, "UNIQUE constraint failed")
    assert has("gen_sample.jsonl", 1, "NOT NULL constraint failed")
    assert has("gen_verifier.pure_code.jsonl", 1, "verifier code is null")
    assert has("gen_verifier.pure_code.jsonl", 3, "duplicate verifier for task 1")
    shop = report.scenarios["shop"]
    assert shop.stages["tasks"]["tasks"] == 2
    assert shop.stages["db_schema"]["tables_failed"] == 1 and shop.stages["db_schema"]["valid"] is False
    assert shop.stages["sample_data"]["inserts_failed"] == 2
    verifiers = store.read_json("shop", "verifiers.json")["verifiers"]
    assert [v["task_idx"] for v in verifiers] == [1] and "# second" not in verifiers[0]["code"]
    assert report.scenarios["only_tasks"].missing[0] == "db_schema"


def test_failed_import_does_not_overwrite_the_store(corpus_dir, tmp_path, monkeypatch):
    store = ArtifactStore(tmp_path)
    import_awm_dir(corpus_dir / "generated", store)
    before = store.read_text("rover", "server.py")
    import awm_resources.interop as interop

    def exploding_build(*args, **kwargs):
        raise RuntimeError("simulated crash while building the database")

    monkeypatch.setattr(interop, "build_database", exploding_build)
    report = import_awm_dir(corpus_dir / "generated", store)
    assert not report.scenarios and any("store left unchanged" in i.problem for i in report.issues)
    assert store.read_text("rover", "server.py") == before
    assert not list(store.scenarios_root.glob(".import-*"))


def test_import_registers_partitions_and_materializations(corpus_dir, tmp_path):
    from awm_assets.importing import import_into_dagster

    store = ArtifactStore(tmp_path)
    with dg.DagsterInstance.ephemeral() as instance:
        import_into_dagster(corpus_dir / "awm1k-sample", store, instance)
        keys = instance.get_dynamic_partitions("scenarios")
        assert {"content_platform_1", "e_commerce_33", "code_hosting_2"} <= set(keys)
        mat = instance.get_latest_materialization_event(dg.AssetKey("env_code"))
        assert mat is not None and mat.asset_materialization.partition == "content_platform_1"
        meta = mat.asset_materialization.metadata
        assert meta["tools"].value == 34 and meta["source"].value == "imported"
        # No verifiers for content_platform_1: nothing is reported for that stage.
        ver = instance.fetch_materializations(dg.AssetKey("verifiers"), limit=10).records
        assert {r.asset_materialization.partition for r in ver} == {"e_commerce_33"}


def test_cli_import_catalog_export(corpus_dir, tmp_path):
    env = {"AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh"), "PATH": "/usr/bin:/bin",
           "HF_HUB_OFFLINE": "1"}
    awm = [sys.executable, "-m", "awm_assets.cli"]
    out = subprocess.run([*awm, "import", str(corpus_dir / "generated"), "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["scenarios"]) == 5
    out = subprocess.run([*awm, "catalog", "--json"], env=env, capture_output=True, text=True, timeout=120)
    catalog = json.loads(out.stdout)
    assert [e["name"] for e in catalog] == GENERATED_SCENARIOS
    for e in catalog:
        assert {"name", "tasks", "tables", "sample_rows", "tools", "lines_of_code", "verifiers", "source", "stages", "ready"} <= set(e)
        assert e["ready"] and e["source"] == "imported" and e["tasks"] == 10 and e["verifiers"] == 10
    out = subprocess.run([*awm, "export", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and (tmp_path / "out" / "gen_envs.jsonl").is_file()
    bad = subprocess.run([*awm, "import", str(tmp_path / "nowhere")], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


# -- robustness at scale (streaming, whole-scenario replacement, bad input) ----------------------------------

def _copy_corpus(src: Path, dst: Path, copies: int, rename=lambda base, i: f"{base} copy {i}") -> Path:
    """`copies` scenarios under new names built from the corpus's records (what `awm bench scale` does)."""
    from benchmarks.scale import make_copies

    make_copies(src, dst, copies, name_for=rename)
    return dst


def test_parallel_import_matches_and_reimport_replaces_whole(corpus_dir, tmp_path):
    src = _copy_corpus(corpus_dir / "generated", tmp_path / "src", 10)
    store = ArtifactStore(tmp_path / "home")
    report = import_awm_dir(src, store, workers=2)  # 10 scenarios: built in two worker processes
    assert len(report.scenarios) == 10 and all(s.written and not s.missing for s in report.scenarios.values())
    key = "rover_copy_4"
    assert store.present_stages(key) == list(STAGES)
    assert not [p for p in store.scenarios_root.iterdir() if p.name.startswith(".")]  # no staging left behind
    store.write_text(key, "server.py", "# edited after the import\n")
    (store.scenario_dir(key) / "quality.json").write_text("{}")
    # The same source again, now without env code for every scenario: each scenario is replaced whole.
    (src / "gen_envs.jsonl").write_text("")
    again = import_awm_dir(src, store, workers=1)
    assert again.scenarios[key].missing == ["env_code"]
    assert not store.has(key, "server.py") and not store.has(key, "quality.json")
    assert store.present_stages(key) == [s for s in STAGES if s != "env_code"]


def test_name_collisions_bad_bytes_and_other_sources(corpus_dir, tmp_path):
    src = _copy_corpus(corpus_dir / "generated", tmp_path / "src", 5, rename=lambda base, i: base)
    with (src / "gen_scenario.jsonl").open("a") as fh:  # a second name for gofundme's key
        fh.write(json.dumps({"name": "GOFUNDME", "description": "another scenario"}) + "\n")
    with (src / "gen_tasks.jsonl").open("ab") as fh:  # one bad byte in one line
        fh.write(b'{"scenario": "Rover", "tasks": ["caf\xe9"]}\n')
    store = ArtifactStore(tmp_path / "home")
    report = import_awm_dir(src, store)
    problems = [str(i) for i in report.issues]
    assert "gofundme" not in report.scenarios and not store.has("gofundme", "scenario.json")
    assert any("'GoFundMe'" in p and "'GOFUNDME'" in p and "same key 'gofundme'" in p for p in problems)
    assert any(p.startswith("gen_tasks.jsonl:6 ") and "not UTF-8" in p for p in problems)
    assert sorted(report.scenarios) == ["doordash_drive_delivery_tracking", "etsy_digital_downloads",
                                        "fortnite_item_shop", "rover"]
    # The same scenarios from another folder are not taken silently.
    other = _copy_corpus(corpus_dir / "generated", tmp_path / "other", 5, rename=lambda base, i: base)
    kept = import_awm_dir(other, store)
    assert "rover" not in kept.scenarios
    assert any("already imported from" in str(i) and "[rover]" in str(i) for i in kept.issues)
    assert store.stage_status("rover", "scenario")["source_dir"] == str(src.resolve())
    taken = import_awm_dir(other, store, replace=True)
    assert "rover" in taken.scenarios and store.stage_status("rover", "scenario")["source_dir"] == str(other.resolve())


def test_published_reader_finds_each_modes_function_first():
    """`lead_with` moves a mode's function before the first `def verify_` line (the published reader calls that
    one), whatever comes before it: a helper named verify_*, a nested def, decorators; the module still runs."""
    from awm_resources.published_verifiers import function_read_by_peer, lead_with

    code = ("import functools\n\n\ndef verify_rows(db):\n    def verify_inner():\n        return 1\n    return verify_inner()\n\n\n"
            "def verify_task(initial_db_path, final_db_path):\n    return {'rows': verify_rows(initial_db_path)}\n\n\n"
            "@functools.lru_cache(None)\ndef _cached():\n    return 2\n\n\n"
            "@functools.wraps(_cached)\n"
            "def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n"
            "    return {'result': 'complete' if verify_task(1, 2)['rows'] == _cached() - 1 else 'others'}\n")
    assert function_read_by_peer(code, "verify_task_completion") == "verify_rows"
    for function in ("verify_task", "verify_task_completion"):
        led = lead_with(code, function)
        assert function_read_by_peer(led, "") == function
        namespace: dict = {}
        exec(compile(led, "<verifier>", "exec"), namespace)  # noqa: S102 - the test's own code
        assert namespace["verify_task_completion"]("a", "b") == {"result": "complete"}
    assert lead_with("def verify_task(:\n", "verify_task_completion") == "def verify_task(:\n"  # unparsable: unchanged
