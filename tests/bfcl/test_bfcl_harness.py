"""The BFCL harness in-process: every category's ground truth, miss_func turns, bad calls, the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn
from awm_rl.bfcl import MULTI_TURN_CATEGORIES, BFCLEnvironment, evaluate_bfcl, load_cases


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_ground_truth_passes_bfcl_checker_in_every_multi_turn_category(category, tmp_path):
    report = evaluate_bfcl(category, "ground_truth", out_dir=tmp_path, limit=20, concurrency=1)
    assert report.cases == 20 and report.accuracy >= 0.95, [c for c in report.per_case if not c["valid"]]


def test_miss_func_adds_functions_at_their_turn(tmp_path):
    [case] = load_cases("multi_turn_miss_func", ids=["multi_turn_miss_func_0"])
    assert case.missed_function == {"3": [f for f in case.missed_function["3"]]} and \
        [f["name"] for f in case.missed_function["3"]] == ["sort"]
    env = BFCLEnvironment([case])
    handle = env.acquire(case.id)
    assert "sort" not in {t["name"] for t in env.list_tools(handle)}
    result = env.call_tool(handle, "sort", {"file_name": "final_report.pdf"})
    assert not result.ok and result.error_kind == "agent" and "not a function" in result.text
    turns = [env.next_user_turn(handle) for _ in range(3)]
    assert [t.tools is None for t in turns] == [True, True, False]
    assert turns[2].content.startswith("I have updated some more functions") and '"name": "sort"' in turns[2].content
    assert "sort" in {t["name"] for t in env.list_tools(handle)}
    assert env.next_user_turn(handle) is not None and env.next_user_turn(handle) is None
    env.release(handle)


def test_malformed_calls_give_error_turns_not_a_crash(tmp_path):
    [case] = load_cases("multi_turn_base", limit=1)
    script = [
        list_tools_turn(),
        "<think>broken</think><tool_call>{\"name\": \"call_tool\", \"arguments\": {oops</tool_call>",  # not JSON
        call_tool_turn("wrong tool", "rm_rf_everything", {}),  # unknown tool
        call_tool_turn("injection", "cd", {"folder='x'),__import__('os').system('true'),(": 1}),
        call_tool_turn("a real call", "cd", {"folder": "document"}),
        render_turn("done", None, "Done."),
        render_turn("nothing to do", None, "I cannot do that."),
    ]
    policy = ScriptedPolicy({(case.id, case.index): script}, name="broken")
    report = evaluate_bfcl("multi_turn_base", policy, out_dir=tmp_path, limit=1)
    [row] = report.per_case
    assert not row["valid"] and row["error_type"].startswith("multi_turn:")
    assert row["termination"] == "final_answer" and row["user_turns_reached"] == row["user_turns"] == 4
    doc = json.loads((tmp_path / "cases" / f"{case.id}.json").read_text())
    steps = doc["episode"]["steps"]
    assert steps[1]["format"]["rule"] == "tool_call_json" and steps[1]["user_turn"] == 0
    messages = doc["episode"]["messages"]
    error_turns = [m["content"] for m in messages if m["role"] == "tool" and m["content"].startswith("Format error")]
    assert error_turns and "tool_call_json" in error_turns[0] and "Nothing was executed" in error_turns[0]
    # After the error the conversation went on with the next user request (as BFCL's harness does).
    assert steps[2]["user_turn"] == 1 and steps[2]["format"]["rule"] == "unknown_tool"
    assert steps[3]["user_turn"] == 2 and steps[3]["tool"]["ok"] is False
    assert "identifiers" in steps[3]["tool"]["text"]  # never reached BFCL's eval()
    assert doc["model_result_decoded"] == [[], [], [["cd(folder='document')"]], []]
    assert doc["execution_results"][2] == [['{"current_working_directory": "document"}']]
    assert doc["bfcl_verdict"]["error_type"] == "multi_turn:empty_turn_model_response"  # BFCL's checker said so


def test_tiny_policy_runs_two_cases_end_to_end(tmp_path):
    report = evaluate_bfcl("multi_turn_base", "tiny", out_dir=tmp_path / "run", limit=2, concurrency=1,
                           cache_dir=tmp_path / "models", max_new_tokens=64, max_steps_per_turn=2)
    assert report.policy == "tiny" and report.cases == 2 and 0.0 <= report.accuracy <= 1.0
    for row in report.per_case:
        assert row["steps"] >= 1 and row["termination"] != "policy_error", row
        doc = json.loads(Path(row["trajectory"]).read_text())
        assert doc["episode"]["policy"] == "tiny" and doc["episode"]["steps"][0]["completion_tokens"] > 0


def test_bfcl_package_loads_no_dagster():
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    code = ("import sys, awm_rl.bfcl, awm_rl.bfcl.commands; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dagster', 'awm_assets')); print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_long_context_tool_answers_reach_the_policy_whole(tmp_path):
    report = evaluate_bfcl("multi_turn_long_context", "ground_truth", out_dir=tmp_path,
                           ids=["multi_turn_long_context_114"])
    assert report.accuracy == 1.0
    doc = json.loads((tmp_path / "cases" / "multi_turn_long_context_114.json").read_text())
    longest = max(len(m["content"]) for m in doc["episode"]["messages"] if m["role"] == "tool")
    assert longest > 30_000 and not any("more characters truncated" in m["content"] for m in doc["episode"]["messages"])


@pytest.mark.slow
def test_every_single_turn_category_and_bfcls_overall_through_its_own_checker(tmp_path):
    """Three cases of each single-turn category and of one multi-turn category, ground truth replayed
    through the loop, scored by BFCL's AST/relevance checkers in its own environment (one call), and
    BFCL's leaderboard aggregation over them."""
    from awm_rl.bfcl import SINGLE_TURN_CATEGORIES, evaluate_suite

    suite = evaluate_suite([*SINGLE_TURN_CATEGORIES, "multi_turn_base"], "ground_truth", out_dir=tmp_path, limit=3,
                           concurrency=2)
    assert suite.bfcl_eval_version == "2026.3.23"
    assert {c: (r.cases, r.accuracy) for c, r in suite.reports.items()} == \
        {c: (3, 1.0) for c in [*SINGLE_TURN_CATEGORIES, "multi_turn_base"]}
    row = suite.leaderboard["data_overall"]
    assert row["Model"] == "ground_truth" and row["Non-Live AST Acc"] == "100.00%" and row["Live Acc"] == "100.00%"
    # BFCL weighs multi-turn 30%: one of four categories at 100% adds 7.5 points; agentic (40%) was not run.
    assert row["Multi Turn Acc"] == "25.00%" and row["Web Search Acc"] == "N/A"
    assert suite.overall["overall"] == 0.375 and suite.overall["overall_without_agentic"] == 0.625
    # What BFCL stored and scored for a parallel case: both calls in its FC result form.
    doc = json.loads((tmp_path / "parallel" / "cases" / "parallel_0.json").read_text())
    assert doc["valid"] and [list(c) for c in doc["model_result"]] == [["spotify.play"], ["spotify.play"]]
    # Java values are written as Java literals, which BFCL's converter parsed back.
    java = json.loads((tmp_path / "simple_java" / "cases" / "simple_java_1.json").read_text())
    assert "new HashMap<String, Object>()" in json.loads(java["model_result"][0]["SQLCompletionAnalyzer.makeProposalsFromObject"])["params"]


def test_a_missing_bfcl_environment_is_a_clear_error(tmp_path, monkeypatch):
    from awm_rl.bfcl import BFCLUnavailable, evaluate_suite

    monkeypatch.setenv("AWM_BFCL_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(BFCLUnavailable, match="make bfcl-venv"):
        evaluate_suite(["irrelevance"], "ground_truth", out_dir=tmp_path / "run", limit=1)
