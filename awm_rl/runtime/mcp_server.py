"""One environment as a standard MCP server (fastmcp, streamable HTTP), for any MCP client.

`awm serve SCENARIO` runs this in its own process: the scenario's env code is loaded by a
`ScenarioHost` (same tool listing, argument convention and FastAPI validation as the pool), one
instance with its own in-memory database copy is served, and an extra `reset_environment` tool
restores the initial database. Calls run one at a time per instance (`ScenarioHost.call_tool_async`):
concurrent calls never share a transaction, every acknowledged write is committed before the next
call starts, a reset waits for the calls in flight, and each call has its own deadline. The process is the worker: network refused while env code runs, an
address-space cap, a deadline per call (a handler spinning on the event loop is interrupted; one stuck
in C code or a thread ends the process through the watchdog).

Tools whose route has a response model list an `outputSchema` and return `structuredContent` beside
the text (`output_schemas`); errors are `isError` results with the text only.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.tools.base import Tool, ToolResult as McpToolResult
from mcp.types import TextContent
from pydantic import PrivateAttr

from awm_rl.runtime.host import ScenarioHost
from awm_rl.runtime.output_schemas import OutputSchema, build_output_schemas

RESET_TOOL = "reset_environment"


class _EnvTool(Tool):
    """An environment tool: arguments go unchanged to the app (FastAPI validates them, as over HTTP)."""

    _host: Any = PrivateAttr(default=None)
    _instance: str = PrivateAttr(default="")
    _output: OutputSchema | None = PrivateAttr(default=None)

    async def run(self, arguments: dict[str, Any]) -> McpToolResult:
        result = await self._host.call_tool_async(self._instance, self.name, arguments)
        content = [TextContent(type="text", text=result.text)]
        if not result.ok or self._output is None:
            return McpToolResult(content=content, is_error=not result.ok)
        structured, mismatch = self._output.structured(result.text, result.status)
        if mismatch is not None:  # the env broke its own response model: an error, as FastAPI's 500 for it
            return McpToolResult(content=[*content, TextContent(type="text", text=mismatch)], is_error=True)
        return McpToolResult(content=content, structured_content=structured, meta=self._output.meta)


class _ResetTool(Tool):
    _host: Any = PrivateAttr(default=None)
    _instance: str = PrivateAttr(default="")

    async def run(self, arguments: dict[str, Any]) -> McpToolResult:
        await self._host.reset_async(self._instance)  # after the calls in flight
        return McpToolResult(content=[TextContent(type="text", text='{"reset": true}')],
                             structured_content={"reset": True})


def build_mcp_server(host: ScenarioHost) -> tuple[FastMCP, str]:
    """A FastMCP server exposing every tool of `host` on one new instance; returns (server, instance id)."""
    instance = host.create_instance()
    server = FastMCP(name=f"awm-{host.scenario}",
                     instructions=f"Agent World Model environment {host.scenario!r}: {len(host.tools)} tools over "
                                  "a private SQLite database. Call reset_environment to restore the initial state.")
    outputs = build_output_schemas(host.env.app, host.tools)
    for spec in host.list_tools():
        output = outputs.get(spec["name"])
        tool = _EnvTool(name=spec["name"], description=spec["description"] or spec["name"],
                        parameters=spec["input_schema"], output_schema=output.schema if output else None)
        tool._host, tool._instance, tool._output = host, instance, output
        server.add_tool(tool)
    reset_name = RESET_TOOL if RESET_TOOL not in host.tools else f"awm_{RESET_TOOL}"
    reset = _ResetTool(name=reset_name, description="Restore this environment's database to its initial state.",
                       parameters={"type": "object", "properties": {}},
                       output_schema={"type": "object", "properties": {"reset": {"type": "boolean"}},
                                      "required": ["reset"]})
    reset._host, reset._instance = host, instance
    server.add_tool(reset)
    return server, instance
