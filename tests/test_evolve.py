"""Synthesis aimed at what the policy fails (`awm evolve`): the targeted seed batch, its prompt and cap, and one
whole offline round on the demo (evaluation, weaknesses, targeted batch, its recorded scenario generation and
six stages, the gate and the catalog)."""

from __future__ import annotations

import pytest

from awm_assets.synthesis import prompts
from awm_assets.synthesis.seeds import SeedFileError, next_targeted_name, read_seed_batch, targeted_batch_lines

WEAK = [{"dimension": "task_kind", "key": "chain", "episodes": 4, "failed": 3, "fail_rate": 0.75, "modes": {"gave_up": 3},
         "examples": [{"scenario": "issue_tracker", "task_idx": 2, "task": "Close #14 as a duplicate of #9.",
                       "mode": "gave_up", "detail": "answered after 1 tool calls; never called ['close_issue']"}]}]


def test_a_targeted_batch_round_trips_through_the_seed_file(tmp_path):
    lines = targeted_batch_lines(WEAK, [{"name": "Issue Tracker", "description": "issues", "failed": 3},
                                        {"name": "Music Playlists", "failed": 1}],
                                 evaluation="evaluations/x", max_new_scenarios=1, candidates=3)
    path = tmp_path / f"{next_targeted_name(['demo', 'evolve_1', 'evolve_x'])}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    batch = read_seed_batch(path)
    assert batch.key == "evolve_2" and [s["name"] for s in batch.seeds] == ["Issue Tracker", "Music Playlists"]
    assert batch.focus is not None and batch.focus["weaknesses"] == WEAK and batch.focus["max_new_scenarios"] == 1
    (tmp_path / "plain.txt").write_text("GitHub\n")
    assert read_seed_batch(tmp_path / "plain.txt").focus is None
    with pytest.raises(ValueError, match="no weaknesses"):
        targeted_batch_lines([], [], evaluation="e", max_new_scenarios=1, candidates=3)


@pytest.mark.parametrize(("focus_lines", "problem"), [
    (['{"focus": {"weaknesses": []}}', '{"focus": {"weaknesses": []}}'], "b.jsonl:2: a second 'focus' line"),
    (['{"focus": {"weaknesses": "chain"}}'], "b.jsonl:1: 'focus' must be an object with a 'weaknesses' list"),
    (['{"focus": {"weaknesses": [], "max_new_scenarios": 0}}'], "b.jsonl:1: focus 'max_new_scenarios' must be a positive"),
])
def test_a_bad_focus_line_is_named(tmp_path, focus_lines, problem):
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join([*focus_lines, '{"name": "GitHub"}']) + "\n")
    with pytest.raises(SeedFileError, match=problem):
        read_seed_batch(path)


def test_the_targeted_prompts_carry_the_evidence_and_task_styles():
    text = prompts.targeted_scenario_generation([{"name": "Issue Tracker", "description": "issues"}], ["Issue Tracker"],
                                                3, ["developer_tools", "other"], {"weaknesses": WEAK})[1]["content"]
    assert "task_kind = chain: failed 3 of 4 episodes (75%)" in text
    assert 'issue_tracker task 2: "Close #14 as a duplicate of #9." -> gave_up (answered after 1 tool calls' in text
    assert '"task_styles": [str]' in text and "Generate 3 new scenarios" in text
    plain = prompts.tasks("Shop", "A shop.", 10)[1]["content"]
    styled = prompts.tasks("Shop", "A shop.", 10, styles=["find the oldest open order, then cancel it"])[1]["content"]
    assert "practise" not in plain and "- find the oldest open order, then cancel it" in styled
    assert styled.startswith("Scenario: Shop\nA shop.\n\nThis scenario exists to practise these kinds of task")
    assert styled.endswith(plain.split("A shop.\n", 1)[1])  # otherwise the prompt every scenario gets


def test_the_newest_weaknesses_become_the_next_targeted_batch(tmp_path, monkeypatch):
    """Written into the seed folder the sensor watches, named after the store's earlier targeted batches; a
    report with nothing failed writes nothing and says why."""
    from awm_assets.synthesis.targeted_batch import NoWeaknessesReport, write_targeted_batch
    from awm_resources.documents import WeaknessGroup, WeaknessReport
    from awm_resources.store import ArtifactStore, atomic_write_json
    from awm_rl.evaluation.weaknesses import write_report

    monkeypatch.setenv("AWM_SEED_DIR", str(tmp_path / "seeds"))
    store = ArtifactStore(tmp_path / "home")
    with pytest.raises(NoWeaknessesReport, match="materialize `weaknesses` first"):
        write_targeted_batch(store)
    store.write_json("issue_tracker", "scenario.json", {"name": "Issue Tracker", "description": "issues"})
    atomic_write_json(store.root / "batches" / "evolve_1.json", {"batch": "evolve_1"})
    group = WeaknessGroup(**WEAK[0])
    category = WeaknessGroup(dimension="category", key="developer_tools", episodes=4, failed=3, fail_rate=0.75,
                             examples=WEAK[0]["examples"])
    write_report(store, WeaknessReport(evaluation=str(tmp_path / "e" / "20260101-000000-a"), policy="p", episodes=4,
                                       failed=3, groups=[group, category], weaknesses=[group]))
    out = write_targeted_batch(store, max_new_scenarios=2)
    assert out["seed_batch"] == str(tmp_path / "seeds" / "evolve_2.jsonl") and out["weaknesses"] == ["task_kind=chain"]
    batch = read_seed_batch(out["seed_batch"])
    assert [s["name"] for s in batch.seeds] == ["Issue Tracker"] and batch.focus["max_new_scenarios"] == 2
    assert batch.focus["weaknesses"][0]["examples"][0]["task"] == "Close #14 as a duplicate of #9."

    write_report(store, WeaknessReport(evaluation=str(tmp_path / "e" / "20260102-000000-b"), policy="p", episodes=4,
                                       failed=0, groups=[], weaknesses=[]))
    assert write_targeted_batch(store)["reason"] == "p failed none of 4 episodes: nothing to aim at"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # allows for a 2-core machine loaded 20-fold (and the demo fixture when it runs first)
def test_an_offline_evolve_round_on_the_demo(demo_pristine, ray_address, tmp_path, monkeypatch):
    """`awm evolve` on a copy of the demo store, offline: the untrained tiny policy fails the demo tasks, the
    weaknesses become batch evolve_1, whose recorded answers (seeds/recordings/_batch_evolve_1 and the accepted
    scenario's folder) give one new scenario that passes the gate and enters the catalog; the lineage is in the
    Dagster instance."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    import dagster as dg

    from awm_resources.store import ArtifactStore
    from tests.conftest import PROJECT_ROOT

    home, seeds = tmp_path / "home", tmp_path / "seeds"
    shutil.copytree(demo_pristine, home)
    env = {**os.environ, "AWM_HOME": str(home), "DAGSTER_HOME": str(tmp_path / "dh"), "AWM_SEED_DIR": str(seeds),
           "AWM_LLM_MODEL": "replay", "AWM_REPLAY_DIR": str(PROJECT_ROOT / "seeds" / "recordings"),
           "RAY_ADDRESS": ray_address}  # the session's Ray: the evaluation's pool starts no cluster of its own
    (tmp_path / "dh").mkdir()
    out = subprocess.run([sys.executable, "-m", "awm_assets.cli", "evolve", "--policy", "tiny", "--tasks-per-env", "1",
                          "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (round_,) = json.loads(out.stdout)["rounds"]
    assert {"dimension": "failure_mode", "key": "format_rule", "failed": 3, "episodes": 3, "fail_rate": 1.0} \
        in round_["weaknesses"]
    assert round_["evaluation"]["policy"] == "tiny" and round_["evaluation"]["failed"] == 3
    assert round_["seed_batch"] == str(seeds / "evolve_1.jsonl")
    assert round_["new_scenarios"] == ["clinic_appointment_portal"]
    assert (round_["catalog_before"], round_["catalog_after"]) == (3, 4)

    store = ArtifactStore(home)
    scenario = store.scenario("clinic_appointment_portal")
    assert scenario.seed_batch == "evolve_1" and scenario.task_styles and "failure_mode=format_rule" in scenario.targets
    tasks_prompt = store.list_attempts("clinic_appointment_portal", "tasks")[0]["prompts"]["_"][1]["content"]
    assert all(style in tasks_prompt for style in scenario.task_styles)
    batch = json.loads((home / "batches" / "evolve_1.json").read_text())
    assert batch["counts"]["accepted"] == 1 and batch["counts"]["capped"] >= 1  # the batch's cap of one
    assert list((home / "weaknesses").glob("*.png"))

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))  # the persistent instance `awm evolve` recorded into
    with dg.DagsterInstance.get() as instance:
        for key in ("evaluation", "weaknesses", "targeted_seed_batch"):
            assert instance.get_latest_materialization_event(dg.AssetKey(key)) is not None, key
        generation = instance.get_latest_materialization_event(dg.AssetKey("scenario_generation"))
        assert generation is not None and generation.asset_materialization.partition == "evolve_1"
