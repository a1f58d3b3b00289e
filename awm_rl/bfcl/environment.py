"""BFCL's stateful executable backends as an environment of our agent loop.

`BFCLEnvironment` implements what `awm_rl.agent.loop.run_episode` needs from a pool: `acquire`
(one test case: its backend instances, loaded from the case's `initial_config`), `list_tools`
(BFCL's function docs as `{"name", "description", "input_schema"}`), `call_tool` (executes the
call against that case's backend instances with BFCL's own `execute_multi_turn_func_call`, the
function BFCL's inference harness uses), `next_user_turn` (BFCL's user turns in order; a miss_func
turn that adds functions says so with BFCL's own prompt and the new function docs) and `release`.

Every call that reaches a backend is recorded as BFCL's execution string (`name(k=repr(v), ...)`,
the form BFCL's function-calling handlers decode model output to) under its user turn and step,
which is what BFCL's multi-turn checker scores.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from awm_rl.agent.loop import UserTurn
from awm_rl.bfcl.data import BFCLCase, ensure_bfcl, function_to_tool, tools_json

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BACKEND_ERROR = "Error during execution:"


@dataclass
class ToolResult:
    ok: bool
    status: int | None
    text: str
    error_kind: str | None = None


def to_execution_string(name: str, arguments: dict[str, Any]) -> str:
    """BFCL's execution form of one structured call (as `convert_to_function_call` in
    bfcl_eval.model_handler.utils writes it: keyword arguments with Python reprs)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


@dataclass
class CaseState:
    """One acquired test case: the backend instance namespace, the turn cursor, the executed calls."""

    case: BFCLCase
    model_name: str
    user_turn: int = 0
    calls: list[list[list[str]]] = field(default_factory=lambda: [[]])  # per user turn, per step
    results: list[list[list[str]]] = field(default_factory=lambda: [[]])


class BFCLEnvironment:
    """The loop's environment over BFCL test cases (acquire by case id)."""

    def __init__(self, cases: list[BFCLCase], *, run_tag: str | None = None) -> None:
        ensure_bfcl()
        self.cases = {c.id: c for c in cases}
        # BFCL keys its backend instances by model name and test id in a module namespace; a
        # tag per environment keeps runs in one process (tests, the UI) from sharing state.
        self.run_tag = re.sub(r"\W", "_", run_tag or f"awm_{uuid.uuid4().hex[:10]}")
        self.states: dict[str, CaseState] = {}
        # What each released case left behind: its calls, their results, the backends' final state.
        self.finished: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------------- the pool API
    def acquire(self, scenario: str) -> CaseState:
        case = self.cases.get(scenario)
        if case is None:
            raise KeyError(f"no BFCL case {scenario!r} in this environment")
        state = CaseState(case=case, model_name=f"{self.run_tag}_infer")
        self._execute(state, [])  # instantiate the backends from the case's initial_config
        with self._lock:
            self.states[case.id] = state
        return state

    def list_tools(self, handle: CaseState) -> list[dict[str, Any]]:
        return [function_to_tool(d) for d in handle.case.functions_at(handle.user_turn)]

    def call_tool(self, handle: CaseState, name: str, arguments: dict[str, Any]) -> ToolResult:
        known = {d["name"] for d in handle.case.functions_at(handle.user_turn)}
        if name not in known:
            return ToolResult(ok=False, status=404, text=f"{name!r} is not a function of this conversation",
                              error_kind="agent")
        bad = [k for k in arguments if not isinstance(k, str) or not _NAME_RE.match(k)]
        if bad:
            return ToolResult(ok=False, status=400, text=f"argument names must be identifiers, got {bad!r}",
                              error_kind="agent")
        call = to_execution_string(name, arguments)
        [result] = self._execute(handle, [call])
        handle.calls[handle.user_turn].append([call])
        handle.results[handle.user_turn].append([result])
        if result.startswith(_BACKEND_ERROR):
            return ToolResult(ok=False, status=400, text=result, error_kind="agent")
        return ToolResult(ok=True, status=200, text=result)

    def next_user_turn(self, handle: CaseState) -> UserTurn | None:
        turns = handle.case.turns
        if handle.user_turn + 1 >= len(turns):
            return None
        handle.user_turn += 1
        handle.calls.append([])
        handle.results.append([])
        added = handle.case.missed_function.get(str(handle.user_turn))
        messages = turns[handle.user_turn]
        if added:
            from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

            content = (f"{DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}\n\nThe new functions (list_tools now "
                       f"returns them too):\n{tools_json(added)}")
            return UserTurn(content=content, tools=self.list_tools(handle))
        return UserTurn(content=user_text(messages))

    def reset(self, handle: CaseState) -> None:  # a case runs once per acquire
        raise NotImplementedError("BFCL cases are not reset; acquire the case again")

    def snapshot(self, handle: CaseState) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None  # the backends' state is scored by BFCL's checker, not kept as databases

    def release(self, handle: CaseState) -> None:
        try:
            self.finished[handle.case.id] = {"calls": handle.calls, "results": handle.results,
                                             "state": self.state_of(handle)}
        finally:
            drop_instances(handle.model_name, handle.case.id)
            with self._lock:
                self.states.pop(handle.case.id, None)

    # ---------------------------------------------------------------------------------- helpers
    def first_message(self, case: BFCLCase) -> str:
        return user_text(case.turns[0])

    def state_of(self, handle: CaseState) -> dict[str, Any]:
        """The public attributes of the case's backend instances (for the trajectory file)."""
        from bfcl_eval.constants.executable_backend_config import OMIT_STATE_INFO_CLASSES, STATELESS_CLASSES

        _, instances = self._instances(handle)
        return {name: {k: _jsonable(v) for k, v in vars(inst).items() if not k.startswith("_")}
                for name, inst in instances.items() if name not in STATELESS_CLASSES + OMIT_STATE_INFO_CLASSES}

    def _execute(self, state: CaseState, calls: list[str]) -> list[str]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        entry = state.case.entry
        results, _ = execute_multi_turn_func_call(
            calls, entry.get("initial_config", {}), entry["involved_classes"], state.model_name, state.case.id,
            long_context=is_long_context(state.case.category), is_evaL_run=False,
        )
        return results

    def _instances(self, state: CaseState):
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        entry = state.case.entry
        return execute_multi_turn_func_call([], entry.get("initial_config", {}), entry["involved_classes"],
                                            state.model_name, state.case.id,
                                            long_context=is_long_context(state.case.category), is_evaL_run=False)


def is_long_context(category: str) -> bool:
    return "long_context" in category or "composite" in category  # as BFCL's harness decides


def user_text(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(str(m.get("content") or "") for m in messages)


def drop_instances(model_name: str, test_id: str) -> None:
    """Forget the backend instances BFCL keeps in its module namespace for (model, test case)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    prefix = re.sub(r"[-./:]", "_", f"{model_name}")
    suffix = re.sub(r"[-./:]", "_", f"_{test_id}_")
    namespace = vars(multi_turn_utils)
    for key in [k for k in list(namespace) if k.startswith(prefix) and suffix in k and k.endswith("_instance")]:
        namespace.pop(key, None)


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
