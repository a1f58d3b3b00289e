"""The `ground_truth` policy for τ²: each task's expected actions replayed through our loop.

One `list_tools` turn, one `call_tool` turn per expected action of the agent (in solo mode the
user's actions too: the solo agent holds the user's device tools), then an answer that carries the
information the task expects to be communicated. A user's own actions (telecom with a user) are not
the agent's to replay, so those tasks only pass in solo mode. A score near 100% proves the harness
(τ²'s environment, our loop, the trajectory handed to τ²'s evaluator) end to end.
"""

from __future__ import annotations

from typing import Any

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn


def replayed_actions(task: Any, *, solo: bool) -> list[Any]:
    actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    return [a for a in actions if solo or a.requestor == "assistant"]


def ground_truth_turns(task: Any, *, solo: bool) -> list[str]:
    turns = [list_tools_turn("I should first see which tools I have.")]
    actions = replayed_actions(task, solo=solo)
    for i, action in enumerate(actions, 1):
        turns.append(call_tool_turn(f"Expected action {i} of {len(actions)}: {action.name}.", action.name,
                                    dict(action.arguments)))
    info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    answer = "Done." + ("" if not info else " " + " ".join(str(x) for x in info))
    return turns + [render_turn("The request is handled.", None, answer)]


def ground_truth_policy(tasks: list[Any], *, solo: bool) -> ScriptedPolicy:
    return ScriptedPolicy({(t.id, i): ground_truth_turns(t, solo=solo) for i, t in enumerate(tasks)},
                          name="ground_truth")
