"""The `ground_truth` policy: BFCL's possible answers replayed as Qwen3 turns through our loop.

A possible answer is, per user turn, a list of BFCL execution strings such as
`mv(source='a.pdf', destination='temp')` or `sort('final_report.pdf')`. Each becomes one
`call_tool` turn with JSON arguments (positional arguments named from the backend method's own
signature), after one `list_tools` turn at the start; each user turn ends with an answer without a
tool call, which is what makes the loop move on to the next user message. The policy is a
`ScriptedPolicy` keyed by (case id, case index): it knows nothing the other policies do not see
except the answers. A score near 100% on multi_turn_base proves the harness (data, presentation,
execution against BFCL's backends, decoding, BFCL's checker) end to end. A single-turn possible
answer gives options per parameter; the first is replayed (see `pick`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any

from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn
from awm_rl.bfcl.data import BFCLCase, language_of
from awm_rl.bfcl.literals import render_arguments


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
    if any(k.arg is None for k in node.keywords):
        raise GroundTruthError(f"possible answer {text!r} unpacks keyword arguments (**)")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except ValueError as exc:
        raise GroundTruthError(f"possible answer {text!r} has a non-literal argument") from exc
    if args:
        fn = methods.get(name)
        if fn is None:
            raise GroundTruthError(f"possible answer {text!r}: no backend method {name!r} to name its arguments")
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        if len(args) > len(params):
            raise GroundTruthError(f"possible answer {text!r}: {len(args)} positional arguments for {name}")
        # fewer positional arguments than parameters is normal: the rest are keywords or defaults
        kwargs = {**{p.name: v for p, v in zip(params, args, strict=False)}, **kwargs}
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


_OMITTED = object()


def pick(options: Any, *, required: bool = False) -> Any:
    """One value from a single-turn possible answer's options, the first one given; "" means the
    parameter may be left out, which a leading "" does unless the function requires it (then the
    first real value; "" itself when it is the only option); dicts hold options per key."""
    if not isinstance(options, list):
        raise GroundTruthError(f"possible answer options must be a list, got {options!r}")
    if not options:  # no value is accepted (a few BFCL answers): leaving it out is the nearest replay
        return _OMITTED
    values = [o for o in options if o != ""]
    if options[0] == "" and not required:
        return _OMITTED
    return _resolve(values[0]) if values else ""


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):
        picked = {k: pick(v) if isinstance(v, list) else _resolve(v) for k, v in value.items()}
        return {k: v for k, v in picked.items() if v is not _OMITTED}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


_PLACEHOLDER = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "dict": {}, "object": {}}


def relevance_call(case: BFCLCase) -> tuple[str, dict[str, Any]]:
    """live_relevance has no possible answer (any call passes): the first function, its required
    parameters filled with a value of their declared type."""
    docs = case.entry.get("function") or []
    if not docs:
        raise GroundTruthError(f"{case.id}: no function to call")
    doc = docs[0]
    params = doc.get("parameters") or {}
    props = params.get("properties") or {}
    return doc["name"], {k: _PLACEHOLDER.get(str(props.get(k, {}).get("type", "string")).lower(), "example")
                         for k in params.get("required") or []}


def single_turn_turns(case: BFCLCase) -> list[str]:
    """list_tools, one call_tool per call of the possible answer, then an answer without a call."""
    turns = [list_tools_turn("I should first see which functions are available.")]
    if "irrelevance" in case.category:
        return turns + [render_turn("None of these functions fits the request.", None,
                                    "None of the functions I have can do this.")]
    if case.category == "live_relevance":
        calls = [relevance_call(case)]
    else:
        calls = []
        for item in case.ground_truth:
            [(name, params)] = item.items()
            doc: dict[str, Any] = next((d for d in case.entry.get("function") or [] if d["name"] == name), {})
            declared_params = (doc.get("parameters") or {}).get("properties") or {}
            required = set((doc.get("parameters") or {}).get("required") or [])
            # An optional answer parameter the function does not declare is left out.
            args = {k: pick(v, required=k in required) for k, v in params.items()
                    if k in declared_params or "" not in v}
            args = {k: v for k, v in args.items() if v is not _OMITTED}
            declared, language = case.extra.get("declared_functions"), language_of(case.category)
            if declared and language:  # Java / JavaScript: values as the literals a model writes
                args = render_arguments(args, declared.get(name) or {}, language)
            calls.append((name, args))
    for i, (name, arguments) in enumerate(calls, 1):
        turns.append(call_tool_turn(f"Call {i} of {len(calls)}: {name}.", name, arguments))
    return turns + [render_turn("The request is done.", None, "Done.")]


def ground_truth_policy(cases: list[BFCLCase]) -> ScriptedPolicy:
    from awm_rl.bfcl.data import is_multi_turn

    return ScriptedPolicy({(c.id, c.index): ground_truth_turns(c) if is_multi_turn(c.category) else single_turn_turns(c)
                           for c in cases}, name="ground_truth")
