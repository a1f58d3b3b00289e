"""Drives `awm serve --openenv` with the `openenv` package's own clients; run under the OpenEnv venv's Python
(`make openenv-venv`: openenv pins fastmcp 3, this project fastmcp 4), so it imports only openenv and the
standard library. One JSON plan as argv[1], one JSON report on stdout (the test asserts on it).

Per session (all at once): reset to the plan's task, list the tools, create a row tagged with the session's number
through one tool, read the rows back through another, reset, read again, then end the episode with `done`.
Sessions alternate between OpenEnv's MCPToolClient (tools over HTTP /mcp, reset/step over /ws) and its
GenericEnvClient (everything over /ws). One extra session replays the reference solution and ends with its
final answer.
"""

import asyncio
import json
import sys
import time

from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient


def tagged(text, marker: str) -> list[str]:
    """Every tag `marker-N` that appears in a tool answer (its text or parsed data)."""
    import re

    return sorted(set(re.findall(rf"{marker}-\d+", text if isinstance(text, str) else json.dumps(text))))


async def mcp_session(plan: dict, number: int) -> dict:
    out: dict = {"number": number, "client": "MCPToolClient"}
    async with MCPToolClient(base_url=plan["url"]) as env:
        started = time.perf_counter()
        first = await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"])
        out["reset_ms"] = (time.perf_counter() - started) * 1000
        out["task"] = first.observation.task
        out["tools"] = [t.name for t in await env.list_tools()]
        write = dict(plan["write_args"], **{plan["tag_field"]: f"{plan['marker']}-{number}"})
        await env.call_tool(plan["write_tool"], **write)
        out["seen_after_write"] = tagged(await env.call_tool(plan["read_tool"], **plan["read_args"]), plan["marker"])
        started = time.perf_counter()
        await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"])
        out["second_reset_ms"] = (time.perf_counter() - started) * 1000
        out["seen_after_reset"] = tagged(await env.call_tool(plan["read_tool"], **plan["read_args"]), plan["marker"])
        try:
            await env.call_tool("verify")
            out["verify"] = "callable"
        except RuntimeError as exc:
            out["verify"] = str(exc)
        end = await env.step(CallToolAction(tool_name="done", arguments={"final_answer": "nothing done"}))
        out["done"], out["reward"], out["outcome"] = end.done, end.reward, (end.metadata or {}).get("outcome")
        out["state"] = (await env.state()).model_dump()
        try:
            await env.step(ListToolsAction())
            await env.call_tool(plan["read_tool"], **plan["read_args"])
            out["after_done"] = "accepted"
        except RuntimeError as exc:
            out["after_done"] = str(exc)
    return out


async def generic_session(plan: dict, number: int) -> dict:
    out: dict = {"number": number, "client": "GenericEnvClient"}
    async with GenericEnvClient(base_url=plan["url"]) as env:
        try:
            await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"], reward_config={"complete": 5.0})
            out["bad_reset"] = "accepted"
        except RuntimeError as exc:
            out["bad_reset"] = str(exc)
        started = time.perf_counter()
        first = await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"])
        out["reset_ms"] = (time.perf_counter() - started) * 1000
        out["task"] = first.observation["task"]
        listing = await env.step({"type": "list_tools"})
        out["tools"] = [t["name"] for t in listing.observation["tools"]]
        write = dict(plan["write_args"], **{plan["tag_field"]: f"{plan['marker']}-{number}"})
        await env.step({"type": "call_tool", "tool_name": plan["write_tool"], "arguments": write})
        read = await env.step({"type": "call_tool", "tool_name": plan["read_tool"], "arguments": plan["read_args"]})
        out["seen_after_write"] = tagged(read.observation["result"]["data"], plan["marker"])
        started = time.perf_counter()
        await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"])
        out["second_reset_ms"] = (time.perf_counter() - started) * 1000
        read = await env.step({"type": "call_tool", "tool_name": plan["read_tool"], "arguments": plan["read_args"]})
        out["seen_after_reset"] = tagged(read.observation["result"]["data"], plan["marker"])
        verify = await env.step({"type": "call_tool", "tool_name": "verify", "arguments": {}})
        out["verify"] = (verify.observation.get("error") or {}).get("message", "callable")
        end = await env.step({"type": "call_tool", "tool_name": "done", "arguments": {"final_answer": "nothing done"}})
        out["done"], out["reward"], out["outcome"] = end.done, end.reward, (end.metadata or {}).get("outcome")
        out["state"] = await env.state()
    return out


async def solution_session(plan: dict) -> dict:
    out: dict = {"client": "MCPToolClient", "calls": []}
    async with MCPToolClient(base_url=plan["url"]) as env:
        await env.reset(scenario=plan["scenario"], task_idx=plan["task_idx"])
        for call in plan["solution"]["calls"]:
            out["calls"].append(await env.call_tool(call["tool"], **call["arguments"]))
        end = await env.step(CallToolAction(tool_name="done",
                                            arguments={"final_answer": plan["solution"]["final_answer"]}))
        out["done"], out["reward"], out["metadata"] = end.done, end.reward, end.metadata
    return out


async def main(plan: dict) -> dict:
    started = time.perf_counter()
    runs = [mcp_session(plan, i) if i % 2 == 0 else generic_session(plan, i) for i in range(plan["sessions"])]
    results = await asyncio.gather(*runs, solution_session(plan), return_exceptions=True)
    wall = time.perf_counter() - started
    report = {"wall_s": wall, "sessions": [], "errors": []}
    for r in results:
        if isinstance(r, BaseException):
            report["errors"].append(f"{type(r).__name__}: {r}")
        elif "number" in r:
            report["sessions"].append(r)
        else:
            report["solution"] = r
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1]))), default=str))
