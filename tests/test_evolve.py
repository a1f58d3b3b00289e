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
