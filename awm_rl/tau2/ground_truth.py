"""The `ground_truth` policy for τ²: each task's expected actions replayed through our loop.

One `list_tools` turn, then each expected action in order: the agent's own as a `call_tool` turn;
a user-side action (telecom, where the user acts on their own device) as a message asking the user to
do it by its tool name, which the scripted or recorded user then does with its own tools (in solo
mode the agent holds the device tools and calls them itself). Last, an answer that carries the
information the task expects to be communicated. A score near 100% proves the harness (τ²'s
environment, our loop, the user, the trajectory handed to τ²'s evaluator) end to end.
"""

from __future__ import annotations

from typing import Any

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn


def expected_actions(task: Any) -> list[Any]:
    return (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []


def ask_user(action: Any) -> str:
    """The agent's request that the user do one action on their device, naming the tool."""
    args = ", ".join(f"{k}={v}" for k, v in (action.arguments or {}).items())
    return f"Please do this on your phone: {action.name}" + (f" with {args}" if args else "") + ", and tell me the result."


def ground_truth_turns(task: Any, *, solo: bool) -> list[str]:
    turns = [list_tools_turn("I should first see which tools I have.")]
    actions = expected_actions(task)
    for i, action in enumerate(actions, 1):
        why = f"Expected action {i} of {len(actions)}: {action.name}"
        if solo or action.requestor == "assistant":
            turns.append(call_tool_turn(f"{why}.", action.name, dict(action.arguments)))
        else:
            turns.append(render_turn(f"{why}, on the user's device.", None, ask_user(action)))
    info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    answer = "Done." + ("" if not info else " " + " ".join(str(x) for x in info))
    return turns + [render_turn("The request is handled.", None, answer)]


def ground_truth_policy(tasks: list[Any], *, solo: bool) -> ScriptedPolicy:
    return ScriptedPolicy({(t.id, i): ground_truth_turns(t, solo=solo) for i, t in enumerate(tasks)},
                          name="ground_truth")
