"""Solvability with the rollout judge: a reference solution must also be judged Completed (replayed judge)."""

from __future__ import annotations

import json

import pytest

from awm_resources.llm import LLMClient
from awm_resources.store import ArtifactStore
from awm_rl.quality.gate import quality, stored_quality
from awm_rl.reward.judge import Judge
from tests.quality.conftest import SCENARIO, write_scenario


def _judge(tmp_path, classification: str) -> Judge:
    folder = tmp_path / f"judge_{classification.replace(' ', '_')}" / SCENARIO
    folder.mkdir(parents=True)
    (folder / "judge_sql.t0.1.md").write_text(json.dumps(
        {"classification": classification, "reasons": "The project exists in the final database with region NA-EAST."}))
    return Judge("sql", llm=LLMClient(replay_dir=folder.parent))


@pytest.mark.parametrize("classification, solvable", [("Completed", "yes"), ("Partially Completed", "no")])
def test_judge_confirms_or_overrules_a_proven_solution(tmp_path, classification, solvable):
    write_scenario(tmp_path / "home")
    store = ArtifactStore(tmp_path / "home")
    judge = _judge(tmp_path, classification)

    result = quality(store, [SCENARIO], judge=judge)["scenarios"][0]

    task = result["tasks"][0]
    assert result["judge"] == "sql:replay"
    assert task["judge"] == classification and task["solvable"] == solvable
    if solvable == "no":
        assert task["verdict"] == "unsolvable" and not task["eligible"]
        assert "judge says Partially Completed" in task["reason"]
    # Stored with the judge that confirmed it: reused for that judge and for none, not for another.
    assert stored_quality(store, SCENARIO, judge)["tasks"][0]["judge"] == classification
    assert stored_quality(store, SCENARIO) is not None
    assert stored_quality(store, SCENARIO, Judge("llm", llm=LLMClient(replay_dir=tmp_path))) is None
