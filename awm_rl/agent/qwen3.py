"""The agent's wire format: two meta-tools, Qwen3 `<think>` / `<tool_call>` text, and its parsing.

The agent sees `list_tools` and `call_tool(tool_name, arguments)` (arguments: a JSON string) and
answers in the Qwen3 format: `<think>reasoning</think>` then at most one
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; an answer without a tool call ends
the episode (its text is the final answer). Tool results come back as `tool` messages (Qwen3's
template renders them as `<tool_response>` user turns). Chat APIs that have no native tool
messages get the same text: the tools block in the system prompt and tool results as user
messages wrapped in `<tool_response>`, so every policy sees the same conversation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

LIST_TOOLS = "list_tools"
CALL_TOOL = "call_tool"

META_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": LIST_TOOLS,
            "description": "List the tools of the environment with their descriptions and JSON input schemas. "
            "Call it once, first.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": CALL_TOOL,
            "description": "Call one environment tool by name. `arguments` is a JSON string holding one "
            "object that matches the tool's input schema.",
            "parameters": {
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string", "description": "a name returned by list_tools"},
                    "arguments": {"type": "string", "description": "JSON object, as a string"},
                },
                "required": ["tool_name", "arguments"],
            },
        },
    },
]

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent operating a software application through its API on behalf of the current "
    "user (user id 1, already logged in). First call list_tools once to discover the application's "
    "tools, then use call_tool to carry out the task. Before every action think step by step inside "
    "<think></think>. Make exactly one tool call per turn. When the task is done, answer without a "
    "tool call, stating the result."
)

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def tools_block(tools: list[dict[str, Any]] = META_TOOLS) -> str:
    """The `# Tools` section Qwen3's chat template puts in the system message."""
    lines = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        f"{lines}\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def as_chat_api_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation for a plain chat API: tools in the system text, tool results as user turns."""
    out: list[dict[str, str]] = []
    for message in messages:
        role, content = message["role"], str(message.get("content") or "")
        if role == "system":
            out.append({"role": "system", "content": f"{content}\n\n{tools_block()}"})
        elif role == "tool":
            wrapped = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped})
        else:
            out.append({"role": role, "content": content})
    return out


def as_native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation for a chat API's own function calling: the meta-tools go as `tools=`, each recorded
    `<tool_call>` becomes the assistant's `tool_calls` entry and the next tool answer its `tool` message.
    Earlier reasoning is left out of the history, as providers and Qwen3's own template do."""
    out: list[dict[str, Any]] = []
    pending: list[Any] = []  # ids of calls still waiting for their tool message
    for i, message in enumerate(messages):
        role, content = message["role"], str(message.get("content") or "")
        if role == "assistant":
            parsed = parse_response(content)
            calls: list[dict[str, Any]] = [{"id": f"call_{i}_{n}", "type": "function",
                      "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                     for n, c in enumerate(parsed.calls)]
            out.append({"role": "assistant", "content": parsed.content or None, **({"tool_calls": calls} if calls else {})})
            pending = [c["id"] for c in calls]
        elif role == "tool" and pending:
            out.append({"role": "tool", "tool_call_id": pending.pop(0), "content": content})
        elif role == "tool":  # an answer to a turn that made no decodable call (e.g. a format error notice)
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": role, "content": content})
    return out


def render_native_turn(content: str, calls: list[dict[str, Any]]) -> str:
    """A native function-calling answer in the Qwen3 wire form every other policy produces: each call as a
    `<tool_call>` (arguments parsed from the provider's JSON string; kept as the raw string when they are not
    JSON, so the format check names the fault), after the visible content."""
    parts = [content.strip()] if content.strip() else []
    for call in calls:
        raw = call.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
        except json.JSONDecodeError:
            arguments = raw
        parts.append("<tool_call>\n" + json.dumps({"name": call.get("name") or "", "arguments": arguments},
                                                   ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(parts)


def with_reasoning(text: str, reasoning: str | None) -> str:
    """A turn with the reasoning a provider returned apart put back in front as `<think>...</think>`, as the
    model produced it (unchanged when there is none, or the text already holds its own block)."""
    if not reasoning or not reasoning.strip() or _THINK_CLOSE in text:
        return text
    return f"{_THINK_OPEN}\n{reasoning.strip()}\n{_THINK_CLOSE}\n\n{text.lstrip()}"


@dataclass
class ToolCall:
    """One parsed `<tool_call>`: the meta-tool and, for call_tool, the target tool and arguments."""

    name: str
    arguments: Any
    raw: str


@dataclass
class ParsedResponse:
    """A model turn split into reasoning, tool calls and visible content (final answer when no call)."""

    text: str
    reasoning: str | None
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    call_errors: list[str] = field(default_factory=list)

    @property
    def final_answer(self) -> str | None:
        return self.content.strip() if not self.calls and not self.call_errors else None


def parse_response(text: str) -> ParsedResponse:
    """Split a Qwen3-format turn. Never raises: problems land in `call_errors` for the validator."""
    reasoning: str | None = None
    rest = text
    close = text.find(_THINK_CLOSE)
    if close >= 0:
        head = text[:close]
        opener = head.find(_THINK_OPEN)
        # A generation prompt may already hold "<think>\n", so the turn can start inside the block.
        reasoning = (head if opener < 0 else head[opener + len(_THINK_OPEN):]).strip()
        rest = text[close + len(_THINK_CLOSE):]
    elif _THINK_OPEN in text:
        rest = ""  # thinking never closed: the whole turn is unfinished reasoning
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in _CALL_RE.finditer(rest):
        body = match.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(f"<tool_call> body is not JSON ({exc.msg} at column {exc.colno}): {body[:200]!r}")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append(f'<tool_call> body must be {{"name": str, "arguments": ...}}, got {body[:200]!r}')
            continue
        calls.append(ToolCall(name=obj["name"], arguments=obj.get("arguments", {}), raw=body))
    tail = _CALL_RE.sub("", rest)
    if "<tool_call>" in tail:
        errors.append("a <tool_call> is never closed with </tool_call>")
    content = tail.replace("<tool_call>", "").replace("</tool_call>", "")
    return ParsedResponse(text=text, reasoning=reasoning, content=content.strip(), calls=calls, call_errors=errors)


def render_turn(reasoning: str, call: dict[str, Any] | None = None, answer: str = "") -> str:
    """A well-formed Qwen3 turn (used by the scripted policy and warm-start data)."""
    text = f"<think>\n{reasoning.strip()}\n</think>\n\n"
    if call is not None:
        return text + "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
    return text + answer


def call_tool_turn(reasoning: str, tool_name: str, arguments: dict[str, Any]) -> str:
    """A turn calling `call_tool` with `arguments` encoded as a JSON string, per the meta-tool."""
    return render_turn(
        reasoning,
        {"name": CALL_TOOL, "arguments": {"tool_name": tool_name, "arguments": json.dumps(arguments, ensure_ascii=False)}},
    )


def list_tools_turn(reasoning: str = "I should first discover which tools this application offers.") -> str:
    return render_turn(reasoning, {"name": LIST_TOOLS, "arguments": {}})
