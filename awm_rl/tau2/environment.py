"""τ²'s environments and users as an environment of our agent loop.

A `Session` is one τ² task in one trial: τ²'s environment initialised the way τ²'s orchestrator
does it (the task's initialization data, actions and message history), the user, and the τ²
message trajectory that τ²'s evaluator scores. `Tau2Environment` is the loop's pool over sessions:
`call_tool` runs the call with τ²'s `get_response` (the tool answer or τ²'s error text),
`next_user_turn` hands the agent's answer to the user and returns the user's reply (running the
user's own tool calls, as τ²'s orchestrator does, until the user says something); a user stop token
ends the episode, as does any answer in solo mode (where there is no user, and the answer stands
for τ²'s `done` tool). The policy's last text is read through `Recorder`, since the loop hands the
pool only the handle.
"""

from __future__ import annotations

import threading
import uuid
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from awm_rl.agent.loop import UserTurn
from awm_rl.agent.policies import PolicyOutput, PolicyRequest
from awm_rl.agent.qwen3 import parse_response
from awm_rl.bfcl.environment import ToolResult
from awm_rl.tau2.data import make_environment

MAX_USER_TOOL_ROUNDS = 20  # user tool calls in a row before the user must speak (τ² bounds steps too)


class Recorder:
    """A policy wrapper that keeps each episode's last generated text for the environment."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.name = policy.name
        self.last: dict[tuple[str, int], str] = {}

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        output = self.policy.generate(request)
        self.last[(request.scenario, request.task_idx)] = output.text
        return output


@dataclass
class Session:
    task: Any
    index: int
    env: Any
    solo: bool
    user: Any = None
    user_state: Any = None
    messages: list[Any] = field(default_factory=list)
    first_message: str = ""
    stopped_by: str | None = None  # "user" | "agent"
    user_error: str | None = None


def tool_schema(tool: Any) -> dict[str, Any]:
    """A τ² tool as one entry of our `list_tools` answer (its own OpenAI schema)."""
    fn = tool.openai_schema["function"]
    return {"name": fn["name"], "description": fn.get("description", ""),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}


def open_session(domain: str, task: Any, index: int, *, solo: bool, make_user) -> Session:
    """τ²'s environment set to the task's initial state; with a user, its first line to our greeting."""
    from tau2.data_model.message import AssistantMessage

    env = make_environment(domain, solo=solo)
    state = task.initial_state
    history = deepcopy(state.message_history) if state is not None and state.message_history else []
    env.set_state(initialization_data=state.initialization_data if state else None,
                  initialization_actions=state.initialization_actions if state else None, message_history=history)
    session = Session(task=task, index=index, env=env, solo=solo, messages=list(history))
    if solo:
        session.first_message = f"Ticket:\n{task.ticket or task.description}"
        return session
    user_tools = env.get_user_tools() if env.user_tools is not None else None
    session.user = make_user(task, user_tools)
    session.user_state = session.user.get_init_state()
    greeting = AssistantMessage(role="assistant", content="Hi! How can I help you today?")  # τ²'s first agent line
    session.messages.append(greeting)
    reply = user_reply(session, greeting)
    session.first_message = reply.content or ""
    return session


def user_reply(session: Session, message: Any) -> Any:
    """The user's next message (its tool calls run against the environment first), appended."""
    from tau2.data_model.message import MultiToolMessage

    reply, session.user_state = session.user.generate_next_message(message, session.user_state)
    for _ in range(MAX_USER_TOOL_ROUNDS):
        if not reply.is_tool_call():
            break
        session.messages.append(reply)
        results = [session.env.get_response(call.model_copy(update={"requestor": "user"})) for call in reply.tool_calls]
        session.messages.extend(results)
        answer = results[0] if len(results) == 1 else MultiToolMessage(role="tool", tool_messages=results)
        reply, session.user_state = session.user.generate_next_message(answer, session.user_state)
    session.messages.append(reply)
    return reply


class Tau2Environment:
    """The loop's environment over prepared sessions (acquire by task id)."""

    def __init__(self, sessions: list[Session], recorder: Recorder) -> None:
        self.sessions = {s.task.id: s for s in sessions}
        self.recorder = recorder
        self._lock = threading.Lock()

    def acquire(self, scenario: str) -> Session:
        session = self.sessions.get(scenario)
        if session is None:
            raise KeyError(f"no τ² task {scenario!r} in this run")
        return session

    def list_tools(self, handle: Session) -> list[dict[str, Any]]:
        tools = list(handle.env.get_tools())
        if handle.solo and handle.env.user_tools is not None:
            tools += handle.env.get_user_tools()
        return [tool_schema(t) for t in tools]

    def call_tool(self, handle: Session, name: str, arguments: dict[str, Any]) -> ToolResult:
        from tau2.data_model.message import AssistantMessage, ToolCall

        call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=dict(arguments), requestor="assistant")
        handle.messages.append(AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        answer = handle.env.get_response(call)
        handle.messages.append(answer)
        if answer.error:
            return ToolResult(ok=False, status=400, text=answer.content or "", error_kind="agent")
        return ToolResult(ok=True, status=200, text=answer.content or "")

    def next_user_turn(self, handle: Session) -> UserTurn | None:
        from tau2.data_model.message import AssistantMessage

        text = parse_response(self.recorder.last.get((handle.task.id, handle.index), "")).content
        message = AssistantMessage(role="assistant", content=text or "")
        handle.messages.append(message)
        if handle.solo or "###STOP###" in (text or ""):
            handle.stopped_by = "agent"
            return None
        try:
            reply = user_reply(handle, message)
        except Exception as exc:  # noqa: BLE001  the user model failing is τ²'s USER_ERROR, not ours
            handle.user_error = f"{type(exc).__name__}: {exc}"
            return None
        from tau2.user.user_simulator import UserSimulator

        if UserSimulator.is_stop(reply):
            handle.stopped_by = "user"
            return None
        return UserTurn(content=reply.content or "")

    def reset(self, handle: Session) -> None:
        raise NotImplementedError("τ² sessions are not reset; open a new one")

    def snapshot(self, handle: Session) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None  # τ²'s evaluator replays the trajectory against fresh environments

    def release(self, handle: Session) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None

    def first_message(self, session: Session) -> str:
        return session.first_message
