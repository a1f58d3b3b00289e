"""BFCL's single-turn categories as an environment of our agent loop.

A single-turn case is one user request and a list of function docs; BFCL scores the calls the model
answers with (their names and argument values, by its AST checker) or, for the relevance categories,
only whether any call was made. The functions are not executable, so `call_tool` records the call and
acknowledges it without running anything; the policy may make several calls (BFCL's parallel
categories expect several) and ends the request with an answer without a call. What was called is
kept in BFCL's function-calling result form, `[{name: json-arguments}, ...]` (what its FC handlers
store and decode), or the final answer's text when no call was made (what BFCL stores for a model
that answered in prose).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from awm_rl.bfcl.data import BFCLCase, function_to_tool
from awm_rl.bfcl.environment import ToolResult, user_text

ACK = ("Recorded {name}: single-turn BFCL functions are not executed. Make any further call the request "
       "needs, then answer without a tool call.")


@dataclass
class SingleTurnState:
    case: BFCLCase
    calls: list[dict[str, str]] = field(default_factory=list)


class SingleTurnEnvironment:
    """The loop's environment over single-turn BFCL cases (acquire by case id)."""

    def __init__(self, cases: list[BFCLCase]) -> None:
        self.cases = {c.id: c for c in cases}
        self.finished: dict[str, list[dict[str, str]]] = {}
        self._lock = threading.Lock()

    def acquire(self, scenario: str) -> SingleTurnState:
        case = self.cases.get(scenario)
        if case is None:
            raise KeyError(f"no BFCL case {scenario!r} in this environment")
        return SingleTurnState(case=case)

    def list_tools(self, handle: SingleTurnState) -> list[dict[str, Any]]:
        return [function_to_tool(d) for d in handle.case.entry.get("function") or []]

    def call_tool(self, handle: SingleTurnState, name: str, arguments: dict[str, Any]) -> ToolResult:
        known = {d["name"] for d in handle.case.entry.get("function") or []}
        if name not in known:
            return ToolResult(ok=False, status=404, text=f"{name!r} is not a function of this request", error_kind="agent")
        handle.calls.append({name: json.dumps(arguments, ensure_ascii=False)})
        return ToolResult(ok=True, status=200, text=ACK.format(name=name))

    def next_user_turn(self, handle: SingleTurnState) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None  # one request per case

    def reset(self, handle: SingleTurnState) -> None:
        raise NotImplementedError("BFCL cases are not reset; acquire the case again")

    def snapshot(self, handle: SingleTurnState) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None

    def release(self, handle: SingleTurnState) -> None:
        with self._lock:
            self.finished[handle.case.id] = list(handle.calls)

    def first_message(self, case: BFCLCase) -> str:
        return user_text(case.turns[0])


def model_result(calls: list[dict[str, str]], final_answer: str | None) -> list[dict[str, str]] | str:
    """BFCL's stored result of one single-turn answer: the calls, or the prose when there were none."""
    return calls if calls else (final_answer or "")
