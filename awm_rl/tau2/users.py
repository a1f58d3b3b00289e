"""The user side of a τ² conversation: τ²'s own LLM user simulator, or a scripted / recorded one.

All three answer `generate_next_message(message, state) -> (UserMessage, state)` like τ²'s
`UserSimulator`. `ScriptedUser` replays fixed lines (the first answers the agent's greeting, each
later one follows an answer of the agent) and then ends the conversation with τ²'s stop token; the
default line is the task's own reason for calling and what the user knows, which is what a
ground-truth run needs. `recorded:<file.json>` reads `{task_id: [lines]}`. Anything else is a
litellm model name for τ²'s `UserSimulator` (temperature 0 unless given).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from awm_rl.tau2.data import Tau2Unavailable

STOP = "###STOP###"  # τ²'s user stop token (tau2.user.base.STOP)


class ScriptedUser:
    """Fixed lines, then τ²'s stop token."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    def get_init_state(self, message_history: list[Any] | None = None) -> dict[str, int]:
        return {"next": 0}

    def generate_next_message(self, message: Any, state: dict[str, int]) -> tuple[Any, dict[str, int]]:
        from tau2.data_model.message import UserMessage

        i = state["next"]
        text = self.lines[i] if i < len(self.lines) else STOP
        return UserMessage(role="user", content=text), {"next": i + 1}


def scenario_line(task: Any) -> str:
    """What the task's user would say first: its reason for calling and what it knows."""
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions
    parts = [getattr(instructions, "reason_for_call", None), getattr(instructions, "known_info", None)]
    return "\n".join(p.strip() for p in parts if p)


def load_recording(path: Path) -> dict[str, list[str]]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Tau2Unavailable(f"recorded user {path}: cannot read it as JSON ({exc})") from exc
    if not isinstance(doc, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                            for v in doc.values()):
        raise Tau2Unavailable(f"recorded user {path}: expected {{task_id: [user lines]}}")
    return doc


def user_factory(spec: str, *, temperature: float = 0.0):
    """`spec` -> a function (task, user_tools) -> user; spec is scripted, recorded:<file>, or a litellm model."""
    if spec == "scripted":
        return lambda task, tools: ScriptedUser([scenario_line(task)])
    if spec.startswith("recorded:"):
        recording = load_recording(Path(spec.split(":", 1)[1]))

        def recorded(task, tools):
            if task.id not in recording:
                raise Tau2Unavailable(f"recorded user {spec}: no lines for task {task.id!r}")
            return ScriptedUser(recording[task.id])
        return recorded
    if not spec:
        raise Tau2Unavailable("a user model is needed (--user-model): scripted, recorded:<file.json>, or a litellm model")

    def simulated(task, tools):
        from tau2.user.user_simulator import UserSimulator

        return UserSimulator(tools=tools or None, instructions=str(task.user_scenario), llm=spec,
                             llm_args={"temperature": temperature})
    return simulated
