"""Step-level format validation (paper point 10): one verdict per step, naming the rule that failed.

A format error ends the episode with reward -1.0. The rules, in the order they are checked:

- `response_too_long`: the turn hit the generation limit (endless text) or the character cap.
- `reasoning`: the turn has no non-empty `<think>` reasoning.
- `tool_call_json`: a `<tool_call>` body is not JSON of the form {"name", "arguments"}, or is unclosed.
- `multiple_tool_calls`: more than one tool call in one turn (the loop and the per-turn training
  samples are one action per turn).
- `unknown_meta_tool`: the call names something other than `list_tools` / `call_tool`.
- `list_tools_first`: the first action is not `list_tools` (a call_tool or a final answer before it).
- `list_tools_once`: `list_tools` called a second time.
- `call_tool_arguments`: call_tool's own arguments are not {"tool_name": str, "arguments": JSON string}.
- `unknown_tool`: `tool_name` is not among the tools list_tools returned.
- `arguments_too_large`: the tool arguments exceed `max_argument_bytes`.
- `arguments_json`: the tool arguments do not parse as one JSON object.
- `arguments_schema`: the tool arguments do not validate against the tool's input schema (a name the tool
  does not take fails here too: tool schemas say `additionalProperties: false`).
- `no_successful_call`: the agent gave its final answer without one successful call after list_tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from awm_rl.agent.qwen3 import CALL_TOOL, LIST_TOOLS, ParsedResponse

FormatRule = Literal[
    "response_too_long", "reasoning", "tool_call_json", "multiple_tool_calls", "unknown_meta_tool",
    "list_tools_first", "list_tools_once", "call_tool_arguments", "unknown_tool", "arguments_too_large",
    "arguments_json", "arguments_schema", "no_successful_call",
]
Action = Literal["list_tools", "call_tool", "final_answer"]


@dataclass
class StepCheck:
    """The verdict on one step: ok, or the rule that failed and why; plus the action it asks for."""

    ok: bool
    action: Action | None = None
    rule: FormatRule | None = None
    detail: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    final_answer: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _fail(rule: FormatRule, detail: str, action: Action | None = None) -> StepCheck:
    return StepCheck(ok=False, rule=rule, detail=detail, action=action)


@dataclass
class FormatValidator:
    """Checks each step of one episode in order; holds what the episode has discovered so far."""

    max_argument_bytes: int = 8192
    max_response_chars: int = 24_000
    # Rules not enforced in this episode (only `reasoning`, `no_successful_call` and
    # `arguments_schema` can be waived: an external benchmark such as BFCL drops rules of our
    # training protocol that its own harness does not have).
    waived: frozenset[str] = frozenset()
    tools: dict[str, dict[str, Any]] | None = None  # name -> input_schema, after list_tools
    list_tools_calls: int = 0
    successful_calls: int = 0
    _validators: dict[str, Draft202012Validator] = field(default_factory=dict)

    # -- what the loop reports back ----------------------------------------------------------------
    def record_tools(self, tools: list[dict[str, Any]]) -> None:
        """The tools list_tools returned (`{"name", "description", "input_schema"}` each)."""
        self.tools = {t["name"]: t.get("input_schema") or {"type": "object"} for t in tools}
        self._validators.clear()

    def record_call_result(self, ok: bool) -> None:
        if ok:
            self.successful_calls += 1

    # -- the checks --------------------------------------------------------------------------------
    def check(self, parsed: ParsedResponse, *, truncated: bool = False) -> StepCheck:
        """The verdict on one model turn, given everything earlier in the episode."""
        if truncated:
            return _fail("response_too_long", "the response hit the generation limit without finishing")
        check = self._check_content(parsed)
        if len(parsed.text) > self.max_response_chars and check.rule != "arguments_too_large":
            return _fail(
                "response_too_long", f"the response has {len(parsed.text)} characters (limit {self.max_response_chars})"
            )
        return check

    def _check_content(self, parsed: ParsedResponse) -> StepCheck:
        if not parsed.reasoning and "reasoning" not in self.waived:
            what = "is empty" if parsed.reasoning == "" else ("is missing (a model whose provider keeps its reasoning "
                                                             "hidden needs the reasoning rule 'optional')")
            return _fail("reasoning", f"the <think> reasoning {what}")
        if parsed.call_errors:
            return _fail("tool_call_json", parsed.call_errors[0])
        if len(parsed.calls) > 1:
            names = [c.name for c in parsed.calls]
            return _fail("multiple_tool_calls", f"{len(parsed.calls)} tool calls in one turn ({names}); one per turn")
        if not parsed.calls:
            return self._check_final(parsed.final_answer or "")
        call = parsed.calls[0]
        if call.name == LIST_TOOLS:
            if self.list_tools_calls:
                return _fail("list_tools_once", "list_tools was already called; call it exactly once", "list_tools")
            self.list_tools_calls += 1
            return StepCheck(ok=True, action="list_tools")
        if call.name != CALL_TOOL:
            return _fail("unknown_meta_tool", f"{call.name!r} is not a meta-tool (use {LIST_TOOLS} or {CALL_TOOL})")
        if self.tools is None:
            return _fail("list_tools_first", "call_tool before list_tools; the first call must be list_tools", "call_tool")
        return self._check_call_tool(call.arguments)

    def _check_final(self, answer: str) -> StepCheck:
        if self.tools is None:
            return _fail("list_tools_first", "final answer without any tool call; the first call must be list_tools",
                         "final_answer")
        if self.successful_calls == 0 and "no_successful_call" not in self.waived:
            return _fail("no_successful_call", "final answer without a successful call_tool after list_tools",
                         "final_answer")
        return StepCheck(ok=True, action="final_answer", final_answer=answer)

    def _check_call_tool(self, meta_args: Any) -> StepCheck:
        if isinstance(meta_args, str):  # some models encode the whole argument object as a string
            try:
                meta_args = json.loads(meta_args)
            except json.JSONDecodeError:
                pass
        if not isinstance(meta_args, dict) or not isinstance(meta_args.get("tool_name"), str) or "arguments" not in meta_args:
            return _fail("call_tool_arguments",
                         f'call_tool takes {{"tool_name": str, "arguments": "<JSON object>"}}, got {str(meta_args)[:200]!r}',
                         "call_tool")
        name = meta_args["tool_name"]
        assert self.tools is not None
        if name not in self.tools:
            return _fail("unknown_tool", f"{name!r} is not a tool of this environment "
                         f"(discovered {len(self.tools)}: {', '.join(sorted(self.tools)[:40])})", "call_tool")
        raw = meta_args["arguments"]
        if isinstance(raw, str):
            size = len(raw.encode("utf-8"))
            if size > self.max_argument_bytes:
                return _fail("arguments_too_large", f"arguments for {name} are {size} bytes (limit {self.max_argument_bytes})", "call_tool")
            try:
                args = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                return _fail("arguments_json", f"arguments for {name} are not JSON ({exc.msg} at column {exc.colno}): {raw[:200]!r}", "call_tool")
        else:
            args = raw if raw is not None else {}
            size = len(json.dumps(args, ensure_ascii=False).encode("utf-8"))
            if size > self.max_argument_bytes:
                return _fail("arguments_too_large", f"arguments for {name} are {size} bytes (limit {self.max_argument_bytes})", "call_tool")
        if not isinstance(args, dict):
            return _fail("arguments_json", f"arguments for {name} must be a JSON object, got {type(args).__name__}", "call_tool")
        error = None if "arguments_schema" in self.waived else best_match(self._validator(name).iter_errors(args))
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "<root>"
            message = error.message[:300]
            if error.validator == "additionalProperties" and isinstance(error.schema.get("properties"), dict):
                message += f"; accepted: {', '.join(error.schema['properties']) or 'none'}"
            return _fail("arguments_schema", f"arguments for {name} do not match its input schema at {where}: {message}",
                         "call_tool")
        check = StepCheck(ok=True, action="call_tool", tool_name=name, arguments=args)
        return check

    def _validator(self, name: str) -> Draft202012Validator:
        validator = self._validators.get(name)
        if validator is None:
            assert self.tools is not None
            validator = Draft202012Validator(self.tools[name])
            self._validators[name] = validator
        return validator
