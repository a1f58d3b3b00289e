"""Weaknesses (awm_rl.evaluation.weaknesses): how a failed episode is classified and how an evaluation is grouped, on
episodes built as the agent loop writes them and a store built by hand (no environment runs here)."""

from __future__ import annotations

import json

import pytest

from awm_resources.documents import WeaknessReport, read
from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.agent.episode import Episode, EpisodeScore, Step, ToolOutcome
from awm_rl.evaluation.weaknesses import analyze, failure_mode, latest_report, task_kind, tool_kind, write_report

LIST = Step(turn=0, response="<tool_call>list_tools</tool_call>", format={"ok": True, "action": "list_tools"},
            tool=ToolOutcome(ok=True, status=200))


def call(turn: int, tool: str, ok: bool = True, status: int = 200, text: str = "{}") -> Step:
    return Step(turn=turn, response="...", format={"ok": True, "action": "call_tool", "tool_name": tool},
                tool=ToolOutcome(ok=ok, status=status, text=text))


def final(turn: int) -> Step:
    return Step(turn=turn, response="done", format={"ok": True, "action": "final_answer"})


def episode(steps: list[Step], termination: str = "final_answer", **kw) -> Episode:
    return Episode(scenario=kw.pop("scenario", "shop"), task_idx=kw.pop("task_idx", 0), task=kw.pop("task", "t"),
                   policy="p", window=10, max_turns=20, steps=steps, termination=termination, **kw)


def score(outcome: str, reasons: str = "") -> EpisodeScore:
    reward = {"completed": 1.0, "partially_completed": 0.1, "format_error": -1.0}.get(outcome, 0.0)
    return EpisodeScore(outcome=outcome, reward=reward, step_rewards=[reward], reasons=reasons)


@pytest.mark.parametrize(("ep", "sc", "needed", "mode", "in_detail"), [
    (episode([LIST, call(1, "get_order")]), score("completed"), {"get_order"}, None, None),
    (episode([Step(turn=0, response="x", format={"ok": False, "rule": "reasoning"})], "format_error",
             format_rule="reasoning", termination_detail="turn 0: reasoning: the <think> reasoning is missing"),
     score("format_error"), None, "format_rule", "reasoning is missing"),
    (episode([LIST, call(1, "get_order", ok=False, status=500)], "environment_error", termination_detail="500"),
     score("environment_error"), {"get_order"}, "environment_error", "500"),
    (episode([], "policy_error", termination_detail="connection refused"), score("agent_error"), None,
     "policy_error", "refused"),
    (episode([LIST, call(1, "list_products"), final(2)]), score("agent_error"), {"get_order", "cancel_order"},
     "wrong_tool", "never ['cancel_order', 'get_order']"),
    (episode([LIST, call(1, "get_order"), call(2, "cancel_order", ok=False, status=422, text="reason required"),
              final(3)]), score("agent_error"), {"get_order", "cancel_order"}, "bad_arguments", "422: reason required"),
    (episode([LIST, call(1, "get_order"), call(2, "get_order")], "max_turns"), score("agent_error"),
     {"get_order", "cancel_order"}, "gave_up", "ran out of turns"),
    (episode([LIST, call(1, "get_order"), final(2)]), score("agent_error"), {"get_order", "cancel_order"},
     "gave_up", "never called ['cancel_order']"),
    (episode([LIST, final(1)]), score("agent_error"), None, "gave_up", "after 0 tool calls"),
    (episode([LIST, call(1, "get_order"), call(2, "cancel_order"), final(3)]), score("partially_completed", "wrong id"),
     {"get_order", "cancel_order"}, "bad_arguments", "wrong id"),
])
def test_failure_modes(ep, sc, needed, mode, in_detail):
    got = failure_mode(ep, sc, needed)
    if mode is None:
        assert got is None
    else:
        assert got is not None and got[0] == mode and in_detail in got[1], got


def test_tool_and_task_kinds():
    assert [tool_kind("list_orders", "GET"), tool_kind("create_order", "POST"), tool_kind("cancel_order", "POST"),
            tool_kind("update_order", "PATCH"), tool_kind("delete_order", "DELETE"), tool_kind("remove_item")] == [
        "read", "create", "update", "update", "delete", "delete"]
    kinds = {"get_order": "read", "cancel_order": "update"}
    assert task_kind(["get_order"], kinds, "") == ("read", "reference_solution")
    assert task_kind(["cancel_order"], kinds, "") == ("write", "reference_solution")
    assert task_kind(["get_order", "cancel_order"], kinds, "") == ("chain", "reference_solution")
    assert task_kind(None, {}, "How many orders did I place in May?") == ("read", "task_text")
    assert task_kind(None, {}, "Cancel order #12.") == ("write", "task_text")
    assert task_kind(None, {}, "Find my oldest open order and cancel it.") == ("chain", "task_text")


def test_an_evaluation_grouped_with_evidence(tmp_path):
    """Three episodes of a hand-built shop: the report counts each dimension, names the episode files, and the
    weakest group (what the policy failed every time) leads."""
    store = ArtifactStore(tmp_path / "home")
    store.write_json("shop", "scenario.json", {"name": "Shop", "category": "e_commerce", "description": "a shop"})
    store.write_json("shop", "tasks.json", {"tasks": ["How much was order 3?", "Cancel order 3.", "Cancel my last order."]})
    store.write_json("shop", "api_spec.json", {"api_groups": [{"group_name": "orders", "endpoints": [
        {"path": "/orders/{id}", "method": "GET", "operation_id": "get_order"},
        {"path": "/orders", "method": "GET", "operation_id": "list_orders"},
        {"path": "/orders/{id}/cancel", "method": "POST", "operation_id": "cancel_order"}]}]})
    store.write_json("shop", "solutions.json", {"tasks": [
        {"task_idx": 0, "calls": [{"tool": "get_order", "arguments": {"id": 3}}]},
        {"task_idx": 1, "calls": [{"tool": "cancel_order", "arguments": {"id": 3}}]},
        {"task_idx": 2, "calls": [{"tool": "list_orders"}, {"tool": "cancel_order", "arguments": {"id": 9}}]}]})
    run = store.root / "evaluations" / "20260101-000000-abcd"
    eps = [(episode([LIST, call(1, "get_order"), final(2)], task_idx=0), score("completed")),
           (episode([LIST, call(1, "cancel_order", ok=False, status=422, text="bad id"), final(2)], task_idx=1),
            score("agent_error")),
           (episode([LIST, call(1, "list_orders"), final(2)], task_idx=2), score("agent_error"))]
    for ep, sc in eps:
        atomic_write_json(run / "episodes" / f"shop.t{ep.task_idx}.json",
                          {"episode": json.loads(ep.model_dump_json()), "score": json.loads(sc.model_dump_json())})
    atomic_write_json(run / "report.json", {"policy": "p"})

    report = analyze(store, run, top=3)
    groups = {(g.dimension, g.key): g for g in report.groups}
    assert (report.episodes, report.failed, report.policy) == (3, 2, "p")
    assert (groups["category", "e_commerce"].failed, groups["category", "e_commerce"].episodes) == (2, 3)
    assert {k for d, k in groups if d == "task_kind"} == {"read", "write", "chain"}
    assert groups["task_kind", "chain"].modes == {"gave_up": 1}
    assert groups["tool_kind", "update"].failed == 2 and groups["tool_kind", "read"].failed == 1  # cancel is POST
    assert groups["failure_mode", "bad_arguments"].fail_rate == 0.3333
    assert groups["task_kind", "write"].examples[0]["episode"].endswith("shop.t1.json")
    assert report.weaknesses[0].fail_rate == 1.0 and report.weaknesses[0].dimension in ("task_kind", "tool_kind")

    path, plot = write_report(store, report)
    assert plot.stat().st_size > 1000
    assert read(WeaknessReport, path) == report and latest_report(store) == (path, report)


def test_a_folder_without_episodes_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no episodes/ folder"):
        analyze(ArtifactStore(tmp_path), tmp_path / "nothing")
