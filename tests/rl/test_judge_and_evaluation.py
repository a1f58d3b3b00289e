"""The judge's LLM modes (reply parsing and control flow with a scripted client), reward rules, and
the evaluation function / asset over the demo batch with the real runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from awm_resources.llm import LLMError, LLMResponse
from awm_rl.agent import Episode, ScriptedPolicy, Step, ToolOutcome
from awm_rl.agent.episode import JudgeVerdict
from awm_rl.reward import Judge, load_task, score_episode
from awm_rl.reward.judge import render_trajectory
from tests.rl.conftest import solution_files


class ScriptedLLM:
    """An LLM client that answers from a list (a fake, for parsing and control-flow tests only)."""

    model = "scripted-judge"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def chat(self, messages, *, tag, **params):
        self.calls.append((messages, tag))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return LLMResponse(text=reply, model=self.model, prompt_tokens=100, completion_tokens=20, cost_usd=0.001)


def _episode(store, tmp_path, scenario="issue_tracker", task_idx=0, answer="There are 3 bugs.") -> Episode:
    record = load_task(store, scenario, task_idx)
    initial, final = tmp_path / "initial.db", tmp_path / "final.db"
    shutil.copyfile(store.path(scenario, "initial.db"), initial)
    shutil.copyfile(store.path(scenario, "initial.db"), final)
    steps = [Step(turn=0, response="<think>list</think><tool_call>{}</tool_call>", format={"ok": True, "action": "list_tools"},
                  tool=ToolOutcome(ok=True, status=200, text="[...]"))]
    return Episode(scenario=scenario, task_idx=task_idx, task=record.task, policy="p", window=10, max_turns=20,
                   steps=steps, termination="final_answer", final_answer=answer, initial_db=str(initial), final_db=str(final))


@pytest.mark.parametrize("classification, reward", [("Completed", 1.0), ("Partially Completed", 0.1),
                                                    ("Agent Error", 0.0), ("Environment Error", 0.0)])
def test_llm_judge_classifications_map_to_rewards(demo_store, tmp_path, classification, reward):
    llm = ScriptedLLM([f'Sure.\n```json\n{{"classification": "{classification}", "reasons": "because"}}\n```'])
    episode = _episode(demo_store, tmp_path)
    verdict = Judge("llm", llm=llm).judge(episode, load_task(demo_store, "issue_tracker", 0))
    assert verdict.classification == classification and verdict.reasons == "because" and verdict.judge_error is None
    assert verdict.prompt_tokens == 100 and verdict.cost_usd == pytest.approx(0.001)
    assert verdict.verifier is None  # llm mode: no evidence
    prompt = llm.calls[0][0][1]["content"]
    assert "# Task" in prompt and "# Verification output" not in prompt
    score = score_episode(episode, verdict)
    assert score.reward == reward and score.step_rewards == [reward]


def test_sql_mode_gives_the_judge_evidence_and_criteria(corpus_store, tmp_path):
    llm = ScriptedLLM(['{"classification": "Agent Error", "reasons": "no item was added"}'])
    episode = _episode(corpus_store, tmp_path, "e_commerce_33", 0, answer="Added.")
    verdict = Judge("sql", llm=llm).judge(episode, load_task(corpus_store, "e_commerce_33", 0))
    assert verdict.classification == "Agent Error"
    assert verdict.verifier["ok"] and verdict.verifier["function"] == "verify_task"
    prompt = llm.calls[0][0][1]["content"]
    assert "top_candidate_under_200_initial" in prompt  # the sql verifier's evidence
    assert "# Success criteria" in prompt and "# Failure criteria" in prompt


def test_judge_reply_that_is_not_json_is_retried_then_recorded(demo_store, tmp_path):
    record = load_task(demo_store, "issue_tracker", 0)
    fixed = ScriptedLLM(["I think it went well!", '{"classification": "Completed", "reasons": "ok"}'])
    verdict = Judge("sql", llm=fixed).judge(_episode(demo_store, tmp_path), record)
    assert verdict.classification == "Completed" and len(fixed.calls) == 2
    assert "not a valid JSON" in fixed.calls[1][0][-1]["content"]
    broken = ScriptedLLM(["no json here", '{"classification": "Great", "reasons": "x"}'])
    verdict = Judge("sql", llm=broken).judge(_episode(demo_store, tmp_path), record)
    assert verdict.classification == "Environment Error" and "classification" in verdict.judge_error
    assert score_episode(_episode(demo_store, tmp_path), verdict).reward == 0.0
    down = ScriptedLLM([LLMError("connection refused")])
    verdict = Judge("llm", llm=down).judge(_episode(demo_store, tmp_path), record)
    assert verdict.classification == "Environment Error" and "connection refused" in verdict.judge_error


def test_judge_needs_an_llm_outside_code_mode():
    with pytest.raises(ValueError, match="needs an LLM"):
        Judge("sql")
    with pytest.raises(ValueError, match="code, llm or sql"):
        Judge("vibes")


def test_code_mode_without_a_code_verifier_is_an_environment_error(corpus_store, tmp_path):
    record = load_task(corpus_store, "content_platform_1", 0)
    episode = _episode(corpus_store, tmp_path, "e_commerce_33", 0)
    verdict = Judge("code").judge(episode, record)
    assert verdict.classification == "Environment Error" and "no code-mode" in verdict.reasons


def test_trajectory_is_trimmed_to_fit():
    steps = [Step(turn=i, response=f"turn {i} " + "x" * 3000, format={"ok": True},
                  tool=ToolOutcome(ok=True, status=200, text="y" * 5000)) for i in range(30)]
    episode = Episode(scenario="s", task_idx=0, task="t", policy="p", window=10, max_turns=30, steps=steps,
                      termination="max_turns")
    text = render_trajectory(episode, max_chars=12_000)
    assert len(text) < 16_000
    assert "## Turn 1" in text and "## Turn 30" in text and "turns omitted" in text and "chars omitted" in text


def test_score_requires_a_verdict_for_normal_endings():
    episode = Episode(scenario="s", task_idx=0, task="t", policy="p", window=10, max_turns=20, termination="final_answer")
    with pytest.raises(ValueError, match="needs a judge verdict"):
        score_episode(episode)
    verdict = JudgeVerdict(mode="code", classification="Completed", reasons="r")
    assert score_episode(episode, verdict).step_rewards == [1.0]


@pytest.mark.slow
def test_evaluate_reference_policy_over_the_demo_catalog(demo_store, tmp_path):
    from awm_rl.evaluation.catalog import evaluate
    from awm_rl.runtime.pool import EnvironmentPool

    policy = ScriptedPolicy.from_solutions(solution_files())
    with EnvironmentPool(demo_store.root, num_hosts=1, prefetch=2) as pool:
        report = evaluate(demo_store, pool, policy, Judge("code"), out_dir=tmp_path / "eval", tasks_per_env=2,
                          window=3, concurrency=4)
    assert report.episodes == 6 and report.pass_rate == 1.0 and report.format_error_rate == 0.0
    assert set(report.per_environment) == {"issue_tracker", "music_playlists", "restaurant_reservations"}
    assert sum(b["episodes"] for b in report.per_bucket.values()) == 6
    assert report.per_bucket["0-2 calls"]["episodes"] >= 1
    saved = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert saved["pass_rate"] == 1.0 and saved["window"] == 3
    assert (tmp_path / "eval" / "pass_rate_by_bucket.png").read_bytes()[:4] == b"\x89PNG"
    one = json.loads((tmp_path / "eval" / "episodes" / "issue_tracker.t0.a0.json").read_text())
    assert one["score"]["outcome"] == "completed" and one["episode"]["steps"]
    assert not list((tmp_path / "eval" / "databases").glob("*/final.db"))  # copies removed after judging
    # Per-task difficulty: every episode in the store's records under this run, and a row per task.
    from awm_resources.difficulty import load_difficulty

    recorded = load_difficulty(demo_store).tasks(run=report.difficulty_run)
    assert len(recorded) == 6 and all(t.attempts == t.completed == 1 for t in recorded.values())
    assert {(r["scenario"], r["task"]) for r in report.per_task} == set(recorded)
    assert all(r["outcome"] == "completed" and r["bucket"] == "easy" and r["attempts"] >= 1 for r in report.per_task)
    assert report.difficulty_buckets["easy"] == 6 and saved["difficulty_run"] == report.difficulty_run
    assert (tmp_path / "eval" / "task_difficulty.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluation_asset_materializes(demo_store):
    from awm_assets.defs.catalog.catalog_asset import environment_catalog
    from awm_assets.defs.evaluation.evaluation_asset import evaluation
    from awm_assets.defs.shared.resources import LLMResource, StoreResource
    from awm_resources.provenance import environment_digest

    result = dg.materialize(
        [environment_catalog, evaluation],
        resources={"store": StoreResource(root=str(demo_store.root)), "judge_llm": LLMResource(model="replay")},
        run_config={"ops": {"evaluation": {"config": {"policy": "reference", "tasks_per_env": 1, "judge_mode": "code"}}}},
    )
    assert result.success
    [mat] = result.asset_materializations_for_node("evaluation")
    assert mat.metadata["pass_rate"].value == 1.0 and mat.metadata["episodes"].value == 3
    assert mat.metadata["pass_at_1"].value == mat.metadata["pass_at_k"].value == 1.0 and mat.metadata["k"].value == 1
    assert mat.metadata["reasoning"].value == "required" and mat.metadata["tool_calling"].value == "text"
    assert Path(mat.metadata["pass_rate_by_bucket_plot"].value).read_bytes()[:4] == b"\x89PNG"
    buckets = [r.data["tool calls required"] for r in mat.metadata["per_bucket"].value.records]
    assert buckets == ["0-2 calls", "3-5 calls", "6-9 calls", "10+ calls"]  # in order, not as strings sort
    assert "](/assets/verifiers?partition=" in mat.metadata["per_environment"].value
    assert [r.data["outcome"] for r in mat.metadata["per_task"].value.records] == ["completed"] * 3
    assert Path(mat.metadata["task_difficulty_plot"].value).read_bytes()[:4] == b"\x89PNG"
    counts = {r.data["bucket"]: r.data["tasks"] for r in mat.metadata["difficulty_buckets"].value.records}
    assert counts == {"untried": 0, "unsolved": 0, "hard": 0, "medium": 0, "easy": 3}  # the reference solves all
    # Provenance: the catalog version it consumed (Dagster records it as the input's data version) and each
    # environment's version.
    digest = result.asset_materializations_for_node("environment_catalog")[0].metadata["catalog_digest"].value
    assert mat.metadata["catalog_digest"].value == digest == mat.tags["dagster/input_data_version/environment_catalog"]
    versions = {r.data["environment"]: r.data["version"] for r in mat.metadata["environment_versions"].value.records}
    assert versions == {k: environment_digest(demo_store, k) for k in ("issue_tracker", "music_playlists",
                                                                      "restaurant_reservations")}
