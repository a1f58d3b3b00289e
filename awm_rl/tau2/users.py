"""The user side of a τ² conversation: τ²'s own LLM user simulator, or a scripted / recorded one.

All three answer `generate_next_message(message, state) -> (UserMessage, state)` like τ²'s
`UserSimulator`. `ScriptedUser` replays fixed lines (the first answers the agent's greeting, each
later one follows an answer of the agent) and then ends the conversation with τ²'s stop token; the
default line is the task's own reason for calling and what the user knows, which is what a
ground-truth run needs. `recorded:<file.json>` reads `{task_id: [lines]}`. Anything else is a
litellm model name for τ²'s `UserSimulator` (temperature 0 unless given).

Where the user holds device tools (telecom), the scripted and recorded users also act as τ²'s user
does: when the agent's message names one of the task's expected user-side actions (`toggle_roaming`
or "toggle roaming"), the user calls that tool with the task's arguments, then reports what the tool
answered. Each expected action is done once; what the agent does not ask for is not done.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from awm_rl.tau2.data import Tau2Unavailable

STOP = "###STOP###"  # τ²'s user stop token (tau2.user.base.STOP)


class ScriptedUser:
    """Fixed lines, then τ²'s stop token; with device actions, each one the agent asks for, done once."""

    def __init__(self, lines: list[str], actions: Iterable[Any] = (), tool_names: Iterable[str] = ()) -> None:
        self.lines = list(lines)
        self.actions = list(actions)  # τ²'s expected user-side actions (name, arguments), in order
        names = {a.name for a in self.actions} | set(tool_names)
        self._mention = _mention_pattern(names) if names else None

    def get_init_state(self, message_history: list[Any] | None = None) -> dict[str, Any]:  # noqa: ARG002 - τ²'s API
        return {"next": 0, "done": (), "calls": {}}

    def generate_next_message(self, message: Any, state: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        from tau2.data_model.message import UserMessage

        if getattr(message, "role", None) == "tool":
            return UserMessage(role="user", content=_report(message, state["calls"])), {**state, "calls": {}}
        asked = self.requested(getattr(message, "content", None) or "", state["done"])
        if asked:
            calls = [_user_call(self.actions[i], n) for n, i in enumerate(asked)]
            return UserMessage(role="user", tool_calls=calls), \
                {**state, "done": state["done"] + tuple(asked), "calls": {c.id: c.name for c in calls}}
        i = state["next"]
        text = self.lines[i] if i < len(self.lines) else STOP
        return UserMessage(role="user", content=text), {**state, "next": i + 1}

    def requested(self, text: str, done: tuple[int, ...]) -> list[int]:
        """Indices of the expected actions not yet done that `text` asks for (one per mention, in order)."""
        if self._mention is None:
            return []
        wanted: dict[str, int] = {}
        for match in self._mention.finditer(text.lower()):
            name = re.sub(r"\s+", "_", match.group(0))
            wanted[name] = wanted.get(name, 0) + 1
        out = []
        for i, action in enumerate(self.actions):
            if i not in done and wanted.get(action.name, 0) > 0:
                wanted[action.name] -= 1
                out.append(i)
        return out


def _mention_pattern(names: set[str]) -> re.Pattern[str]:
    """Tool names as the agent may write them (snake_case or spaced), longest first so that
    `toggle_data_saver_mode` is not read as `toggle_data`."""
    forms = sorted({f for n in names for f in (n.lower(), n.lower().replace("_", " "))}, key=len, reverse=True)
    return re.compile(r"(?<![a-z0-9_])(?:" + "|".join(re.escape(f).replace(r"\ ", r"\s+") for f in forms)
                      + r")(?![a-z0-9_])")


def _user_call(action: Any, n: int) -> Any:
    from tau2.data_model.message import ToolCall

    return ToolCall(id=f"user_{action.action_id or action.name}_{n}", name=action.name,
                    arguments=dict(action.arguments or {}), requestor="user")


def _report(message: Any, calls: dict[str, str]) -> str:
    """What the user tells the agent after acting: each tool it ran and that tool's answer."""
    results = getattr(message, "tool_messages", None) or [message]
    return "I did that on my phone.\n" + "\n".join(f"{calls.get(r.id, 'tool')}: {r.content}" for r in results)


def user_actions(task: Any) -> list[Any]:
    """The task's expected actions that the user does on their own device (telecom), in order."""
    actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    return [a for a in actions if a.requestor == "user"]


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


def _acting(task: Any, tools: list[Any] | None, lines: list[str]) -> ScriptedUser:
    """A scripted user that, holding device tools, also does the task's user-side actions when asked."""
    if not tools:
        return ScriptedUser(lines)
    return ScriptedUser(lines, user_actions(task), [t.name for t in tools])


def user_factory(spec: str, *, temperature: float = 0.0):
    """`spec` -> a function (task, user_tools) -> user; spec is scripted, recorded:<file>, or a litellm model."""
    if spec == "scripted":
        return lambda task, tools: _acting(task, tools, [scenario_line(task)])
    if spec.startswith("recorded:"):
        recording = load_recording(Path(spec.split(":", 1)[1]))

        def recorded(task, tools):
            if task.id not in recording:
                raise Tau2Unavailable(f"recorded user {spec}: no lines for task {task.id!r}")
            return _acting(task, tools, recording[task.id])
        return recorded
    if not spec:
        raise Tau2Unavailable("a user model is needed (--user-model): scripted, recorded:<file.json>, or a litellm model")

    def simulated(task, tools):
        from tau2.user.user_simulator import UserSimulator

        return UserSimulator(tools=tools or None, instructions=str(task.user_scenario), llm=spec,
                             llm_args={"temperature": temperature})
    return simulated
