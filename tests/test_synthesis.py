"""The synthesis DAG for real: ephemeral Dagster instance, replay LLM, real SQLite, embedder and sandboxes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from awm_assets.defs.catalog.catalog_asset import environment_catalog
from awm_assets.defs.shared.resources import EmbedderResource, LLMResource, StoreResource, SynthesisSettings
from awm_assets.defs.synthesis.scenario_assets import scenario_generation
from awm_assets.defs.synthesis.sensors import batch_run_config, new_scenario_sensor, seed_batch_sensor
from awm_assets.defs.synthesis.stage_assets import build_stage_assets
from awm_assets.synthesis.seeds import SeedFileError, read_seed_batch
from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore
from tests.conftest import PROJECT_ROOT

DEMO_SEEDS = PROJECT_ROOT / "seeds" / "demo.jsonl"
RECORDINGS = PROJECT_ROOT / "seeds" / "recordings"
DEMO_SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]


def resources(store_root: Path, replay_dir: Path = RECORDINGS) -> dict:
    return {"llm": LLMResource(model="replay", replay_dir=str(replay_dir)), "store": StoreResource(root=str(store_root)),
            "embedder": EmbedderResource(), "synthesis": SynthesisSettings()}


def step_events(result, step: str, kind: str) -> list:
    return [e for e in result.all_events if e.step_key == step and e.event_type_value == kind]


def generate(instance, store_root, seed_file: Path, replay_dir: Path = RECORDINGS):
    batch = read_seed_batch(seed_file)
    if not instance.has_dynamic_partition("seed_batches", batch.key):
        instance.add_dynamic_partitions("seed_batches", [batch.key])
    return dg.materialize([scenario_generation], instance=instance, partition_key=batch.key,
                          resources=resources(store_root, replay_dir), run_config=batch_run_config(seed_file))


@pytest.fixture(scope="module")
def demo(demo_synthesis):
    """The demo seed batch, synthesized once per session (tests/conftest.py: demo_synthesis)."""
    return demo_synthesis


@pytest.mark.slow
def test_scenario_generation_classifies_dedups_and_registers(demo):
    meta = demo["gen"].asset_materializations_for_node("scenario_generation")[0].metadata
    assert meta["generated"].value == 6 and meta["accepted"].value == 3
    assert meta["rejected_by_classifier"].value == 2 and meta["rejected_as_duplicate"].value == 1
    assert "Song Playlist Manager" in meta["decisions"].value and "cosine 0.9" in meta["decisions"].value
    assert sorted(demo["instance"].get_dynamic_partitions("scenarios")) == DEMO_SCENARIOS


def test_every_demo_stage_materializes_with_checks_passing(demo):
    store = demo["store"]
    for key, result in demo["runs"].items():
        assert result.success, key
        assert store.present_stages(key) == list(STAGES)
        evaluations = result.get_asset_check_evaluations()
        assert len(evaluations) == 2 * len(PIPELINE_STAGES)
        for ev in evaluations:
            assert ev.passed, (key, ev.check_name, ev.description)
            assert ev.partition == key  # partitioned checks: each scenario's page shows its own
        # stages that run generated code say how it was contained
        for stage in ("env_code", "verifiers"):
            mat = result.asset_materializations_for_node(stage)[0]
            assert mat.metadata["os_isolation"].value.startswith("bubblewrap + seccomp"), mat.metadata["os_isolation"]
    sizes = {k: (store.stage_status(k, "db_schema")["tables"], store.stage_status(k, "sample_data")["sample_rows"],
                 store.stage_status(k, "env_code")["tools"], store.stage_status(k, "env_code")["lines_of_code"])
             for k in DEMO_SCENARIOS}
    for key, (tables, rows, tools, loc) in sizes.items():
        assert tables >= 8 and rows >= 100 and tools >= 15 and loc >= 600, (key, sizes[key])


@pytest.mark.parametrize("scenario, stage", [("issue_tracker", "db_schema"), ("issue_tracker", "verifiers"),
                                             ("restaurant_reservations", "sample_data"), ("restaurant_reservations", "env_code"),
                                             ("music_playlists", "env_code")])
def test_recorded_first_attempts_fail_and_are_corrected(demo, scenario, stage):
    result, store = demo["runs"][scenario], demo["store"]
    assert len(step_events(result, stage, "STEP_UP_FOR_RETRY")) == 1
    mat = [m for m in result.asset_materializations_for_node(stage)][0]
    assert mat.metadata["attempts"].value == 2 and mat.metadata["corrected"].value is True
    history = mat.metadata["attempt_history"].value
    assert "Attempt 1: failed" in history and "Error summary given to the next attempt" in history
    attempts = store.list_attempts(scenario, stage)
    assert [a["passed"] for a in attempts] == [False, True]
    summary = next(iter(attempts[0]["error_summaries"].values()))
    prompt_text = json.dumps(attempts[1]["prompts"])
    assert summary[:80] in prompt_text.replace("\\n", "\n") or summary[:40].replace("\n", "\\n") in prompt_text
    assert "Previous attempts" in prompt_text


def test_a_server_error_on_valid_input_is_an_env_code_error_and_is_corrected(demo):
    """The quality gate's tool probe inside the env_code stage: the recorded first attempt crashes on a valid date."""
    attempts = demo["store"].list_attempts("restaurant_reservations", "env_code")
    first = "\n".join(attempts[0]["errors"]["_"])
    assert "get_restaurant_availability" in first and "ValueError" in first and "HTTP 500" in first
    assert attempts[0]["metrics"]["tools_server_error"] == 1 and attempts[1]["metrics"]["tools_server_error"] == 0


def test_verifiers_stage_proves_each_reference_solution(demo):
    """Each new verifier's reference solution runs on the environment and the verifier then says complete."""
    for key in ("music_playlists", "restaurant_reservations"):
        assert demo["store"].stage_status(key, "verifiers")["solutions_proven"] == 10, key


def test_verifier_retry_regenerates_only_the_failed_task(demo):
    attempts = demo["store"].list_attempts("issue_tracker", "verifiers")
    assert set(attempts[1]["prompts"]) == {"task_4"}
    assert attempts[1]["metrics"]["regenerated"] == 1


def test_catalog_lists_the_ready_demo_environments(demo):
    meta = demo["catalog"].asset_materializations_for_node("environment_catalog")[0].metadata
    assert meta["ready"].value == 3
    data = json.loads((demo["root"] / "catalog.json").read_text())
    assert sorted(e["name"] for e in data["environments"]) == DEMO_SCENARIOS
    assert all(e["excluded_tasks"] == [] and e["trainable_tasks"] == 10 for e in data["environments"])
    assert meta["quality_vacuous"].value == 0 and meta["trainable_tasks"].value == 30
    assert "[issue_tracker](/assets/verifiers?partition=issue_tracker) | yes | 10/10 |" in meta["environments"].value


def test_synthesis_statistics_of_the_demo_batch(demo):
    """The paper's Table 1 from what the stages stored: every stage succeeded, recorded corrections count."""
    from awm_assets.defs.catalog.statistics_asset import synthesis_statistics_asset

    result = dg.materialize([synthesis_statistics_asset], resources={"store": StoreResource(root=str(demo["root"]))})
    meta = result.asset_materializations_for_node("synthesis_statistics")[0].metadata
    assert meta["environments_ready"].value == 3
    stats = json.loads((demo["root"] / "synthesis_statistics.json").read_text())
    [batch] = [b for b in stats["batches"] if b["batch"] == "demo"]
    rows = {r["stage"]: r for r in batch["stages"]}
    assert all(r["scenarios"] == 3 and r["success_rate"] == 1.0 for r in rows.values())
    # Recorded first attempts that failed: db_schema once (issue_tracker), env_code twice, verifiers once.
    assert rows["db_schema"]["mean_attempts"] == round(4 / 3, 3) and rows["env_code"]["mean_attempts"] == round(5 / 3, 3)
    assert rows["env_code"]["llm_calls"] >= 5 and rows["tasks"]["prompt_tokens"] > 0
    assert batch["generation"]["accepted"] == 3 and batch["generation"]["llm_calls"] == 2
    assert batch["tokens"] > 0 and batch["cost_per_100_environments_usd"] == 0.0  # replay costs nothing
    assert {r.data["stage"] for r in meta["per_stage"].value.records} >= {"tasks", "verifiers"}


def test_catalog_of_the_corpus_excludes_vacuous_verifiers(corpus_store):
    """The do-nothing audit runs on imported environments too; a vacuous verifier's task is left out."""
    result = dg.materialize([environment_catalog], resources={"store": StoreResource(root=str(corpus_store.root))})
    meta = result.asset_materializations_for_node("environment_catalog")[0].metadata
    data = json.loads((corpus_store.root / "catalog.json").read_text())
    ready = {e["name"]: e for e in data["environments"]}
    assert sorted(ready) == ["doordash_drive_delivery_tracking", "etsy_digital_downloads", "fortnite_item_shop",
                             "gofundme", "rover"]
    # task 0: its verifier passes on the unchanged database (vacuous); task 7: blocked, its refund tool answers 5xx on
    # every valid input (DetachedInstanceError in the generated handler)
    fortnite = ready["fortnite_item_shop"]
    assert (fortnite["excluded_tasks"], fortnite["trainable_tasks"]) == ([0, 7], 8)
    assert fortnite["excluded_reasons"]["7"].startswith("blocked"), fortnite["excluded_reasons"]
    assert meta["quality_vacuous"].value >= 1
    assert any(r.data["reason"].startswith("vacuous") for r in meta["excluded_task_reasons"].value.records)
    not_ready = {e["name"]: e for e in data["not_ready"]}
    assert "verifiers" in not_ready["content_platform_1"]["missing_stages"]


def test_second_seed_batch_backfills_only_its_new_scenarios(demo, tmp_path, monkeypatch):
    """A new batch proposes one existing and one new scenario; only the new one is synthesized."""
    instance, root, store = demo["instance"], demo["root"], demo["store"]
    replay = tmp_path / "recordings"
    shutil.copytree(RECORDINGS, replay)
    shutil.copytree(replay / "music_playlists", replay / "podcast_library")
    (replay / "_batch_second").mkdir()
    (replay / "_batch_second" / "scenarios.1.md").write_text(json.dumps({"scenarios": [
        {"name": "Issue Tracker", "description": "A GitHub-style issue tracker for teams: repositories, issues, labels, milestones.", "category": "developer_tools"},
        {"name": "Podcast Library", "description": "A podcast app: subscribe to shows, queue and rate episodes, organise episodes into playlists and track listening progress.", "category": "media_streaming"},
    ]}))
    (replay / "_batch_second" / "classify.1.md").write_text(json.dumps({"verdicts": [
        {"name": "Issue Tracker", "suitable": True, "reason": "records"}, {"name": "Podcast Library", "suitable": True, "reason": "records"}]}))
    seed_dir = tmp_path / "seeds"
    seed_dir.mkdir()
    (seed_dir / "second.txt").write_text("Pocket Casts\nGitHub\n")
    monkeypatch.setenv("AWM_SEED_DIR", str(seed_dir))

    # The seed sensor registers the batch and asks for its generation run (the sensors read the store resource).
    store_resource = {"store": StoreResource(root=str(root))}
    result = seed_batch_sensor(dg.build_sensor_context(instance=instance, resources=store_resource))
    assert [r.partition_key for r in result.run_requests] == ["second"]
    gen = generate(instance, root, seed_dir / "second.txt", replay)
    meta = gen.asset_materializations_for_node("scenario_generation")[0].metadata
    assert meta["accepted"].value == 1 and meta["rejected_as_duplicate"].value == 1
    # A second tick sees nothing new: the batch file is unchanged.
    assert isinstance(seed_batch_sensor(dg.build_sensor_context(instance=instance, resources=store_resource)),
                      dg.SkipReason)

    before = {k: store.stage_status(k, "tasks")["written_at"] for k in DEMO_SCENARIOS}
    requests = new_scenario_sensor(dg.build_sensor_context(instance=instance, resources=store_resource)).run_requests
    assert [r.partition_key for r in requests] == ["podcast_library"]
    run = dg.materialize(build_stage_assets(), instance=instance, partition_key="podcast_library",
                         resources=resources(root, replay))
    assert run.success and store.present_stages("podcast_library") == list(STAGES)
    assert {k: store.stage_status(k, "tasks")["written_at"] for k in DEMO_SCENARIOS} == before


# -- self-correction edge cases on a small scenario with hand-written recordings -------------------------

NOTES = {"name": "Notes", "key": "notes", "description": "A note-taking app with notebooks, notes and tags.", "source": "synthesized"}
GOOD_TABLES = [
    {"name": "notebooks", "ddl": "CREATE TABLE notebooks (id INTEGER PRIMARY KEY, owner_id INTEGER NOT NULL, title TEXT NOT NULL)", "indexes": []},
    {"name": "notes", "ddl": "CREATE TABLE notes (id INTEGER PRIMARY KEY, notebook_id INTEGER REFERENCES notebooks(id), body TEXT)", "indexes": ["CREATE INDEX ix_notes_nb ON notes(notebook_id)"]},
    {"name": "tags", "ddl": "CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT UNIQUE)", "indexes": []},
    {"name": "note_tags", "ddl": "CREATE TABLE note_tags (note_id INTEGER, tag_id INTEGER, PRIMARY KEY (note_id, tag_id))", "indexes": []},
]


def _bad(table: dict) -> dict:
    return {**table, "ddl": table["ddl"].replace("CREATE TABLE", "CREATE TABEL")}


@pytest.fixture()
def notes(tmp_path):
    root, replay = tmp_path / "store", tmp_path / "replay" / "notes"
    replay.mkdir(parents=True)
    ArtifactStore(root).write_json("notes", "scenario.json", NOTES)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("scenarios", ["notes"])
    yield instance, root, replay
    instance.dispose()


def test_a_stage_that_needs_two_retries(notes):
    instance, root, replay = notes
    tasks = [f"Create a note titled 'Note {i}' in notebook 'Work'" for i in range(10)]
    (replay / "tasks.1.md").write_text('Here are the tasks: {"tasks": ["unterminated')
    (replay / "tasks.summary.1.md").write_text("The answer was truncated JSON; answer with a complete JSON object.")
    (replay / "tasks.2.md").write_text(json.dumps({"tasks": tasks[:9]}))
    (replay / "tasks.summary.2.md").write_text("Only 9 tasks were given; exactly 10 are required.")
    (replay / "tasks.3.md").write_text(f"```json\n{json.dumps({'tasks': tasks})}\n```")
    result = dg.materialize(build_stage_assets(retries=3), selection=["tasks"], instance=instance,
                            partition_key="notes", resources=resources(root, replay.parent))
    assert result.success
    assert len(step_events(result, "tasks", "STEP_UP_FOR_RETRY")) == 2
    meta = result.asset_materializations_for_node("tasks")[0].metadata
    assert meta["attempts"].value == 3 and meta["corrected"].value
    attempts = ArtifactStore(root).list_attempts("notes", "tasks")
    assert "no valid JSON" in attempts[0]["errors"]["_"][0]
    assert attempts[1]["errors"]["_"] == ["expected exactly 10 tasks, got 9"]
    third_prompt = attempts[2]["prompts"]["_"][1]["content"]
    assert "truncated JSON" in third_prompt and "exactly 10 are required" in third_prompt


def test_degraded_keeps_the_attempt_with_the_lowest_error_rate(notes):
    instance, root, replay = notes
    store = ArtifactStore(root)
    store.write_json("notes", "tasks.json", {"tasks": ["t"] * 1})
    first = [_bad(GOOD_TABLES[0]), _bad(GOOD_TABLES[1]), GOOD_TABLES[2], GOOD_TABLES[3]]  # 50% fail
    second = [GOOD_TABLES[0], GOOD_TABLES[1], _bad(GOOD_TABLES[2]), GOOD_TABLES[3]]  # 25% fail
    (replay / "db_schema.1.md").write_text(json.dumps({"tables": first}))
    (replay / "db_schema.2.md").write_text(json.dumps({"tables": second}))
    # No summary recordings: the raw error text is carried over instead.
    result = dg.materialize(build_stage_assets(retries=1), selection=["db_schema"], instance=instance,
                            partition_key="notes", resources=resources(root, replay.parent))
    assert result.success
    meta = result.asset_materializations_for_node("db_schema")[0].metadata
    assert meta["degraded"].value is True and meta["error_rate"].value == 0.25
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["db_schema_valid"].passed and not checks["db_schema_quality"].passed
    assert checks["db_schema_quality"].severity == dg.AssetCheckSeverity.WARN
    assert "CREATE TABEL tags" in store.read_text("notes", "schema.sql")
    assert store.stage_status("notes", "db_schema")["degraded"] is True
    second_prompt = store.list_attempts("notes", "db_schema")[1]["prompts"]["_"][1]["content"]
    assert "raw errors" in second_prompt and "notebooks" in second_prompt


def test_own_bugs_and_missing_recordings_do_not_burn_retries(notes, monkeypatch):
    instance, root, replay = notes
    result = dg.materialize(build_stage_assets(retries=3), selection=["tasks"], instance=instance,
                            partition_key="notes", resources=resources(root, replay.parent), raise_on_error=False)
    assert not result.success
    assert not step_events(result, "tasks", "STEP_UP_FOR_RETRY")
    failure = step_events(result, "tasks", "STEP_FAILURE")[0]
    assert "no recorded answer" in failure.event_specific_data.error.message
    assert "'tasks'" in failure.event_specific_data.error.message and "'notes'" in failure.event_specific_data.error.message
    # The reason is also on the scenario's partition page, as an observation of the stage's partition.
    [record] = instance.fetch_observations(dg.AssetKey("tasks"), limit=1).records
    obs = record.asset_observation
    assert obs.partition == "notes" and "no recorded answer" in obs.metadata["failure"].value
    assert obs.metadata["run_id"].value == result.run_id

    from awm_assets.synthesis import stages

    def buggy(self, ctx):
        raise TypeError("bug in our own code")

    monkeypatch.setattr(stages.TasksStage, "attempt", buggy)
    result = dg.materialize(build_stage_assets(retries=3), selection=["tasks"], instance=instance,
                            partition_key="notes", resources=resources(root, replay.parent), raise_on_error=False)
    assert not result.success and not step_events(result, "tasks", "STEP_UP_FOR_RETRY")
    assert "internal error" in step_events(result, "tasks", "STEP_FAILURE")[0].event_specific_data.error.message
    assert not ArtifactStore(root).has("notes", "tasks.json")


def test_broken_env_code_and_looping_verifier_become_attempt_records(notes):
    """Env code that hangs at import, and a verifier that loops, are retried with clear errors."""
    instance, root, replay = notes
    store = ArtifactStore(root)
    store.write_json("notes", "tasks.json", {"tasks": ["Create a notebook titled 'Work'"]})
    store.write_json("notes", "schema.json", {"tables": GOOD_TABLES})
    from awm_resources.sqlite_build import SchemaTable, build_database, schema_sql

    tables = [SchemaTable.model_validate(t) for t in GOOD_TABLES]
    build_database(store.path("notes", "initial.db"), tables, None)
    store.write_text("notes", "schema.sql", schema_sql(tables))
    store.write_json("notes", "api_spec.json", {"api_groups": [{"group_name": "n", "endpoints": [
        {"path": "/notebooks", "method": "GET", "operation_id": "list_notebooks"}]}]})
    (replay / "env_code.1.md").write_text("```python\nimport time\nwhile True:\n    time.sleep(1)\n```")
    (replay / "verifiers.task_0.1.md").write_text(json.dumps({"python_code": "def verify_task_completion(a, b, final_answer=None):\n    while True:\n        pass\n"}))
    settings = SynthesisSettings(env_check_timeout_s=5, verifier_timeout_s=2)
    res = {**resources(root, replay.parent), "synthesis": settings}
    result = dg.materialize(build_stage_assets(retries=0), selection=["env_code"], instance=instance,
                            partition_key="notes", resources=res, raise_on_error=False)
    assert not result.success
    assert "failed completely" in step_events(result, "env_code", "STEP_FAILURE")[0].event_specific_data.error.message
    env_attempt = store.list_attempts("notes", "env_code")[0]
    assert not env_attempt["passed"] and env_attempt["error_rate"] == 1.0
    assert "did not finish importing within 5s" in " ".join(env_attempt["errors"]["_"])
    assert not store.has("notes", "server.py")

    result = dg.materialize(build_stage_assets(retries=0), selection=["verifiers"], instance=instance,
                            partition_key="notes", resources=res, raise_on_error=False)
    assert not result.success
    ver_attempt = store.list_attempts("notes", "verifiers")[0]
    assert "timeout" in ver_attempt["errors"]["task_0"][0]
    assert not store.has("notes", "verifiers.json")


def test_seed_file_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "batch.jsonl"
    bad.write_text('{"name": "GitHub"}\n{"name": \n{"description": "no name"}\n{"name": "github"}\n')
    with pytest.raises(SeedFileError) as err:
        read_seed_batch(bad)
    msg = str(err.value)
    assert "batch.jsonl:2: malformed JSON" in msg and "batch.jsonl:3: a seed needs" in msg and "batch.jsonl:4: duplicate" in msg
    (tmp_path / "empty.txt").write_text("# only a comment\n")
    with pytest.raises(SeedFileError, match="holds no seed names"):
        read_seed_batch(tmp_path / "empty.txt")
    ok = tmp_path / "names.txt"
    ok.write_text("Zillow\nYelp\n")
    assert [s["name"] for s in read_seed_batch(ok).seeds] == ["Zillow", "Yelp"]


def test_a_seed_batch_typed_in_the_launch_config(tmp_path, monkeypatch):
    """From the UI: add a partition, type the seeds; they are kept as the batch's seed file. A batch the replay
    model has no answers for fails saying a real model is needed."""
    monkeypatch.setenv("AWM_SEED_DIR", str(tmp_path / "seeds"))
    seeds = [json.loads(line) for line in DEMO_SEEDS.read_text().splitlines() if line.strip()]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("seed_batches", ["demo", "my_batch"])

    def launch(key: str, config: dict):
        return dg.materialize([scenario_generation], instance=instance, partition_key=key, raise_on_error=False,
                              resources=resources(tmp_path / "store"),
                              run_config={"ops": {"scenario_generation": {"config": config}}})

    result = launch("demo", {"seeds": seeds})
    assert result.success
    assert read_seed_batch(tmp_path / "seeds" / "demo.jsonl").seeds == read_seed_batch(DEMO_SEEDS).seeds
    other = launch("my_batch", {"seeds": [{"name": "Library book loans"}]})
    message = step_events(other, "scenario_generation", "STEP_FAILURE")[0].event_specific_data.error.message
    assert "needs a real model: set AWM_LLM_MODEL" in message
    assert (tmp_path / "seeds" / "my_batch.jsonl").read_text() == '{"name": "Library book loans"}\n'
    neither = launch("my_batch", {})
    assert "give either `path`" in step_events(neither, "scenario_generation", "STEP_FAILURE")[0].event_specific_data.error.message


def test_synthesis_knobs_are_typed_and_declared_once():
    """Each knob once, with its default (awm_assets.synthesis.config): a misspelled one is an error naming it,
    the Dagster resource shows the same defaults and descriptions, and the stage logic reads attributes (no
    `.get(key, copied default)`)."""
    from pydantic import ValidationError

    from awm_assets.synthesis.config import SynthesisConfig

    with pytest.raises(ValidationError, match="tasks_per_scenarioo"):
        SynthesisConfig(tasks_per_scenarioo=3)
    with pytest.raises(ValidationError, match="verifier_timeout\n"):
        SynthesisSettings(verifier_timeout=3)
    with pytest.raises(ValidationError, match="frozen"):
        SynthesisConfig().tasks_per_scenario = 3
    shown = SynthesisSettings.to_config_schema().as_field().config_type.fields
    assert {n: (f.default_value, f.description) for n, f in shown.items()} == {
        n: (f.default, f.description) for n, f in SynthesisConfig.model_fields.items()}
    assert SynthesisSettings(verifier_timeout_s=2).config() == SynthesisConfig(verifier_timeout_s=2)
    knobs = "|".join(SynthesisConfig.model_fields)
    copied = [f"{p.name}:{n}: {line.strip()}" for p in sorted((PROJECT_ROOT / "awm_assets").rglob("*.py"))
              for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(rf"""\.get\(["']({knobs})["']""", line)]
    assert not copied, copied
