"""One environment as a standard MCP server (fastmcp, streamable HTTP), for any MCP client.

`awm serve SCENARIO` runs this in its own process, which runs no generated code: the scenario is
loaded in a replaceable worker process (`awm_rl.runtime.served`: bubblewrap + seccomp where available,
the same tool listing, argument convention and FastAPI validation as the pool), one instance with its
own in-memory database copy is served, and an extra `reset_environment` tool restores the initial
database. Calls run one at a time, in order: concurrent calls never share a transaction, every
acknowledged write is committed before the next call starts, a reset waits for the calls in flight,
and each call has its own deadline. A call that times out or ends its worker fails with an
environment error; the worker is replaced and the server goes on (see `served`). A request body
above `AWM_MAX_REQUEST_BYTES` (plus room for the JSON-RPC envelope) is refused with HTTP 413 before
it is read whole; answers above `AWM_MAX_ANSWER_BYTES` never leave the worker.

Tools whose route has a response model list an `outputSchema` and return `structuredContent` beside
the text (`output_schemas`); errors are `isError` results with the text only.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.tools.base import Tool
from fastmcp.tools.base import ToolResult as McpToolResult
from mcp.types import TextContent
from pydantic import PrivateAttr

from awm_rl.runtime.output_schemas import OutputSchema
from awm_rl.runtime.served import ServedEnvironment

RESET_TOOL = "reset_environment"


class _EnvTool(Tool):
    """An environment tool: arguments go unchanged to the app (FastAPI validates them, as over HTTP)."""

    _env: Any = PrivateAttr(default=None)
    _output: OutputSchema | None = PrivateAttr(default=None)

    async def run(self, arguments: dict[str, Any]) -> McpToolResult:
        # checked off the event loop (the schema came from generated code), in the call's turn
        result, checked = await self._env.call(self.name, arguments, then=self._check)
        content = [TextContent(type="text", text=result.text)]
        if not result.ok or self._output is None:
            return McpToolResult(content=content, is_error=not result.ok)
        structured, mismatch = checked
        if mismatch is not None:  # the env broke its own response model: an error, as FastAPI's 500 for it
            return McpToolResult(content=[*content, TextContent(type="text", text=mismatch)], is_error=True)
        return McpToolResult(content=content, structured_content=structured, meta=self._output.meta)


    def _check(self, result: Any) -> tuple[dict[str, Any] | None, str | None] | None:
        if not result.ok or self._output is None:
            return None
        return self._output.structured(result.text, result.status)


class _ResetTool(Tool):
    _env: Any = PrivateAttr(default=None)

    async def run(self, arguments: dict[str, Any]) -> McpToolResult:  # noqa: ARG002 - reset takes no arguments
        await self._env.reset()  # after the calls in flight
        return McpToolResult(content=[TextContent(type="text", text='{"reset": true}')],
                             structured_content={"reset": True})


def build_mcp_server(env: ServedEnvironment) -> FastMCP:
    """A FastMCP server exposing every tool of `env` (on its one instance) and a reset tool."""
    names = {spec["name"] for spec in env.tools}
    server = FastMCP(name=f"awm-{env.scenario}",
                     instructions=f"Agent World Model environment {env.scenario!r}: {len(env.tools)} tools over "
                                  "a private SQLite database. Call reset_environment to restore the initial state.")
    for spec in env.tools:
        output = env.outputs.get(spec["name"])
        tool = _EnvTool(name=spec["name"], description=spec["description"] or spec["name"],
                        parameters=spec["input_schema"], output_schema=output.schema if output else None)
        tool._env, tool._output = env, output
        server.add_tool(tool)
    reset_name = RESET_TOOL if RESET_TOOL not in names else f"awm_{RESET_TOOL}"
    reset = _ResetTool(name=reset_name, description="Restore this environment's database to its initial state.",
                       parameters={"type": "object", "properties": {}},
                       output_schema={"type": "object", "properties": {"reset": {"type": "boolean"}},
                                      "required": ["reset"]})
    reset._env = env
    server.add_tool(reset)
    return server


def serve_options() -> dict[str, Any]:
    """How `awm serve` runs the server, for the cost of a call: each answer is one JSON body (a tool call
    answers once and sends no progress, so the event-stream framing, and the task mcp runs beside the
    handler to decide on it, buy nothing), and fastmcp's own tracing spans are off unless
    FASTMCP_TELEMETRY_MODE asks for them (without an OpenTelemetry SDK they are built and dropped)."""
    import os

    import fastmcp

    if "FASTMCP_TELEMETRY_MODE" not in os.environ:
        fastmcp.settings.telemetry_mode = "off"
    return {"json_response": True}


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 (by its Content-Length, or
    as it streams in), never buffered whole by the MCP transport."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.limit:
            return await self._refuse(send)
        seen, started = 0, False

        async def sending(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited, sending)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = (f"request body over {self.limit:,} bytes (AWM_MAX_REQUEST_BYTES plus the JSON-RPC "
                "envelope)").encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
