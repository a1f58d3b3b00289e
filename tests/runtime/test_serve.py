"""`awm serve` as a real MCP server (subprocess, streamable HTTP) driven by a fastmcp client
(tests/runtime/test_mcp_inspector.py drives it with the official MCP Inspector CLI)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from awm_rl.runtime.tools import example_arguments, looks_read_only

from .serving import serve_cmd, start_serve, stop_serve
from .test_pool import ENVS, WRITES, _route_ops


@pytest.mark.parametrize("scenario", ENVS)
def test_mcp_session_against_awm_serve(corpus_store, scenario):
    """Every corpus environment over MCP: list tools, read, write, FastAPI's 422, reset."""
    from fastmcp import Client

    proc, url = start_serve(corpus_store.root, scenario)
    try:
        async def session() -> None:
            async with Client(url) as client:
                tools = {t.name: t for t in await client.list_tools()}
                assert "reset_environment" in tools
                assert set(tools) - {"reset_environment"} == _route_ops(corpus_store, scenario)

                read = None
                for name, tool in tools.items():
                    args = example_arguments(tool.input_schema)
                    if looks_read_only(name) and args is not None:
                        res = await client.call_tool(name, args, raise_on_error=False)
                        if not res.is_error:
                            read = (name, args, res.content[0].text)
                            break
                assert read, "no read tool answered"
                # The route's response model is the tool's output schema; the body, its structured content.
                assert tool.output_schema and res.structured_content == json.loads(read[2])

                write_tool, field = WRITES[scenario]
                args = example_arguments(tools[write_tool].input_schema)
                if field:
                    args[field] = "mcp-session-write"
                written = await client.call_tool(write_tool, args, raise_on_error=False)
                assert not written.is_error, written.content[0].text

                required = tools[write_tool].input_schema.get("required", [])
                if required:
                    bad = await client.call_tool(write_tool, {}, raise_on_error=False)
                    assert bad.is_error
                    detail = json.loads(bad.content[0].text)["detail"]  # FastAPI's 422 text, as over HTTP
                    assert any(d["type"] == "missing" for d in detail)

                reset = await client.call_tool("reset_environment", {})
                assert not reset.is_error
                again = await client.call_tool(read[0], read[1])
                assert again.content[0].text == read[2]
        asyncio.run(session())
    finally:
        stop_serve(proc)


def test_serve_unknown_scenario(corpus_store):
    res = subprocess.run(serve_cmd("atlantis", "--port", "0", "--home", str(corpus_store.root)),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "unknown scenario 'atlantis'" in res.stderr and "rover" in res.stderr
