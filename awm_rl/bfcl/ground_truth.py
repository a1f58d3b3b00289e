"""The `ground_truth` policy: BFCL's possible answers replayed as Qwen3 turns through our loop.

A possible answer is, per user turn, a list of BFCL execution strings such as
`mv(source='a.pdf', destination='temp')` or `sort('final_report.pdf')`. Each becomes one
`call_tool` turn with JSON arguments (positional arguments named from the backend method's own
signature), after one `list_tools` turn at the start; each user turn ends with an answer without a
tool call, which is what makes the loop move on to the next user message. The policy is a
`ScriptedPolicy` keyed by (case id, case index): it knows nothing the other policies do not see
except the answers. A score near 100% on multi_turn_base proves the harness (data, presentation,
execution against BFCL's backends, decoding, BFCL's checker) end to end.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn
from awm_rl.bfcl.data import BFCLCase


class GroundTruthError(ValueError):
    """A possible answer that cannot be turned into a JSON tool call."""


def _methods(case: BFCLCase) -> dict[str, Any]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    methods: dict[str, Any] = {}
    for class_name in case.entry["involved_classes"]:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                methods[name] = fn
    return methods


def parse_call(text: str, methods: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`name(args)` -> (name, keyword arguments), positional ones bound by the method's signature."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise GroundTruthError(f"possible answer {text!r} is not a Python call: {exc}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise GroundTruthError(f"possible answer {text!r} is not a plain function call")
    name = node.func.id
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError as exc:
        raise GroundTruthError(f"possible answer {text!r} has a non-literal argument") from exc
    if args:
        fn = methods.get(name)
        if fn is None:
            raise GroundTruthError(f"possible answer {text!r}: no backend method {name!r} to name its arguments")
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        if len(args) > len(params):
            raise GroundTruthError(f"possible answer {text!r}: {len(args)} positional arguments for {name}")
        kwargs = {**{p.name: v for p, v in zip(params, args)}, **kwargs}
    return name, kwargs


def ground_truth_turns(case: BFCLCase) -> list[str]:
    """The whole scripted conversation of one case (one text per model turn)."""
    methods = _methods(case)
    turns = [list_tools_turn("I should first see which functions are available.")]
    for user_turn, calls in enumerate(case.ground_truth):
        for i, text in enumerate(calls, 1):
            name, arguments = parse_call(text, methods)
            turns.append(call_tool_turn(f"Request {user_turn + 1}, call {i} of {len(calls)}: {name}.", name, arguments))
        if calls:
            turns.append(render_turn("This request is done.", None, "Done."))
        else:
            turns.append(render_turn("The functions or details I have do not let me do this.", None,
                                     "I cannot do that with what I have; please give me the missing details."))
    return turns


def ground_truth_policy(cases: list[BFCLCase]) -> ScriptedPolicy:
    return ScriptedPolicy({(c.id, c.index): ground_truth_turns(c) for c in cases}, name="ground_truth")
