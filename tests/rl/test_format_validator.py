"""The step-level format validator: one case per rule, plus Qwen3 parsing and the history window."""

from __future__ import annotations

import json

import pytest

from awm_rl.agent.loop import window_messages
from awm_rl.agent.qwen3 import (
    as_chat_api_messages,
    call_tool_turn,
    list_tools_turn,
    parse_response,
    render_turn,
)
from awm_rl.agent.validator import FormatValidator

TOOLS = [
    {"name": "get_campaign", "description": "Get a campaign",
     "input_schema": {"type": "object", "properties": {"campaign_id": {"type": "integer"}}, "required": ["campaign_id"]}},
    {"name": "search", "description": "Search",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}}}},
]


def discovered() -> FormatValidator:
    validator = FormatValidator()
    assert validator.check(parse_response(list_tools_turn())).ok
    validator.record_tools(TOOLS)
    return validator


def test_well_formed_episode_passes_every_step():
    validator = FormatValidator()
    first = validator.check(parse_response(list_tools_turn()))
    assert first.ok and first.action == "list_tools"
    validator.record_tools(TOOLS)
    call = validator.check(parse_response(call_tool_turn("Look it up.", "get_campaign", {"campaign_id": 3})))
    assert call.ok and call.action == "call_tool" and call.tool_name == "get_campaign" and call.arguments == {"campaign_id": 3}
    validator.record_call_result(True)
    final = validator.check(parse_response(render_turn("Done.", None, "Campaign 3 is active.")))
    assert final.ok and final.action == "final_answer" and final.final_answer == "Campaign 3 is active."


def test_generation_prompt_may_hold_the_think_opener():
    parsed = parse_response('I will list tools.\n</think>\n\n<tool_call>\n{"name": "list_tools", "arguments": {}}\n</tool_call>')
    assert parsed.reasoning == "I will list tools." and parsed.calls[0].name == "list_tools"


def call(name: str, arguments) -> str:
    return render_turn("Reasoning here.", {"name": "call_tool", "arguments": {"tool_name": name, "arguments": arguments}})


@pytest.mark.parametrize(
    "text, truncated, rule",
    [
        (list_tools_turn(), True, "response_too_long"),
        ("<think>" + "x" * 30_000 + "</think>", False, "response_too_long"),
        ('<tool_call>{"name": "list_tools", "arguments": {}}</tool_call>', False, "reasoning"),
        ('<think>\n\n</think>\n\n<tool_call>{"name": "list_tools", "arguments": {}}</tool_call>', False, "reasoning"),
        ("<think>hm</think><tool_call>{name: list_tools}</tool_call>", False, "tool_call_json"),
        ('<think>hm</think><tool_call>{"name": "list_tools"', False, "tool_call_json"),
        ('<think>hm</think><tool_call>["list_tools"]</tool_call>', False, "tool_call_json"),
        (list_tools_turn() + "\n" + list_tools_turn().split("</think>")[1], False, "multiple_tool_calls"),
        (render_turn("hm", {"name": "get_campaign", "arguments": {"campaign_id": 1}}), False, "unknown_meta_tool"),
    ],
)
def test_turn_level_rules(text, truncated, rule):
    check = FormatValidator().check(parse_response(text), truncated=truncated)
    assert not check.ok and check.rule == rule and check.detail


def test_list_tools_first():
    check = FormatValidator().check(parse_response(call_tool_turn("go", "search", {"q": "x"})))
    assert check.rule == "list_tools_first" and "before list_tools" in check.detail
    no_call = FormatValidator().check(parse_response(render_turn("I know this.", None, "42")))
    assert no_call.rule == "list_tools_first"


def test_list_tools_once():
    check = discovered().check(parse_response(list_tools_turn()))
    assert check.rule == "list_tools_once"


@pytest.mark.parametrize(
    "text, rule, fragment",
    [
        (render_turn("r", {"name": "call_tool", "arguments": {"name": "search"}}), "call_tool_arguments", "tool_name"),
        (call("delete_everything", "{}"), "unknown_tool", "delete_everything"),
        (call("search", json.dumps({"q": "x" * 50_000})), "arguments_too_large", "bytes"),  # a 50 kB argument
        (call("search", {"q": "x" * 50_000}), "arguments_too_large", "bytes"),
        (call("search", "{q: 1"), "arguments_json", "not JSON"),
        (call("search", "[1, 2]"), "arguments_json", "JSON object"),
        (call("get_campaign", json.dumps({"campaign_id": "three"})), "arguments_schema", "campaign_id"),
        (call("get_campaign", "{}"), "arguments_schema", "required"),
    ],
)
def test_call_tool_rules(text, rule, fragment):
    check = discovered().check(parse_response(text))
    assert not check.ok and check.rule == rule, check
    assert fragment in check.detail


def test_arguments_may_be_an_object_or_a_string():
    assert discovered().check(parse_response(call("search", {"q": "lamp"}))).ok
    assert discovered().check(parse_response(call("search", '{"q": "lamp", "limit": 3}'))).ok


def test_final_answer_needs_a_successful_call():
    validator = discovered()
    validator.record_call_result(False)  # a 4xx answer does not count
    check = validator.check(parse_response(render_turn("Give up.", None, "Could not do it.")))
    assert check.rule == "no_successful_call"


def test_tool_call_inside_reasoning_is_not_a_call():
    parsed = parse_response('<think>maybe <tool_call>{"name": "x"}</tool_call></think>\n\nThe answer is 4.')
    assert parsed.calls == [] and parsed.final_answer == "The answer is 4."


def test_window_keeps_system_task_first_exchange_and_last_w():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(6):
        messages += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": f"t{i}"}]
    kept = window_messages(messages, 2)
    assert [m["content"] for m in kept] == ["s", "task", "a0", "t0", "a4", "t4", "a5", "t5"]
    assert window_messages(messages, None) == messages
    assert [m["content"] for m in window_messages(messages, 0)] == ["s", "task", "a0", "t0"]
    assert window_messages(messages[:6], 3) == messages[:6]


def test_chat_api_messages_wrap_tool_results():
    out = as_chat_api_messages([{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
                                {"role": "assistant", "content": "a"}, {"role": "tool", "content": "[]"}])
    assert "<tools>" in out[0]["content"] and "call_tool" in out[0]["content"]
    assert out[-1] == {"role": "user", "content": "<tool_response>\n[]\n</tool_response>"}
