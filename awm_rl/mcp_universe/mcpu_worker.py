"""MCP-Universe's own parts, run in its own environment: its server list, its MCP clients and its evaluators.

This file runs as a script under the Python of the `mcpuniverse` venv (`make mcp-universe-venv`: the package
pins mcp 1.13, pydantic 2.11 and a dozen SDKs, which clash with this stack) and imports nothing but the
standard library and mcpuniverse. It reads one JSON request per line on stdin and answers one JSON line on
stdout (MCP-Universe's own logging goes to stderr):

    {"op": "servers"}                                   -> {"servers": {name: {"command", "env"}}}
    {"op": "describe", "path"}                          -> {"question", "output_format", "servers", "evaluators",
                                                            "prepares", "cleanups", "category"}
    {"op": "open", "session", "servers": [names]}       -> {"tools": [{"name", "server", "description",
                                                            "input_schema"}]}
    {"op": "call", "session", "server", "tool", "arguments"} -> {"ok", "text"}
    {"op": "evaluate", "path", "answer"}                -> {"results": [{"func", "op", "value", "desc", "passed",
                                                            "reason", "error"}]}
    {"op": "close", "session"}                          -> {"closed": true}

Every answer may instead be {"error": "..."}. Servers are started by MCP-Universe's `MCPManager` (stdio, its
own server list); tasks are read and evaluated by its `Task` (its evaluators, on the agent's answer).
"""

import asyncio
import json
import sys
from importlib.metadata import version


async def serve() -> None:
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    from mcpuniverse.mcp.manager import MCPManager

    manager = MCPManager()
    sessions: dict = {}
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(json.dumps({"ready": True, "mcpuniverse_version": version("mcpuniverse")}), flush=True)
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            request = json.loads(line)
            answer = await handle(manager, sessions, request)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller, named
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer, default=str), flush=True)
    for queue, task in sessions.values():
        await queue.put(({"op": "close"}, loop.create_future()))
        await task


async def handle(manager, sessions: dict, request: dict) -> dict:
    op = request.get("op")
    if op == "servers":
        out = {}
        for name, config in manager.get_configs().items():
            stdio = getattr(config, "stdio", None)
            out[name] = {"command": getattr(stdio, "command", None) or "",
                         "env": sorted((getattr(config, "env", None) or {}).keys())}
        return {"servers": out}
    if op == "describe":
        from mcpuniverse.benchmark.task import Task

        task = Task(request["path"])
        config = task._config  # the validated TaskConfig: what the task file says
        return {"question": task.get_question(), "output_format": task.get_output_format(),
                "servers": [s.get("name") for s in task.get_mcp_servers()], "category": config.category,
                "evaluators": [{"func": e.func, "op": e.op, "value": e.value, "desc": e.desc}
                               for e in config.evaluators],
                "prepares": [p.prepare_func for p in config.prepares],
                "cleanups": [c.cleanup_func for c in config.cleanups]}
    if op == "open":
        ready = asyncio.get_running_loop().create_future()
        queue: asyncio.Queue = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(session(manager, request["servers"], ready, queue))
        tools = await ready  # raises what opening raised (the session's task has ended then)
        sessions[request["session"]] = (queue, task)
        return {"tools": tools}
    if op in ("call", "close"):
        if op == "close" and request["session"] not in sessions:
            return {"closed": True}
        queue, task = sessions[request["session"]]
        done = asyncio.get_running_loop().create_future()
        await queue.put((request, done))
        answer = await done
        if op == "close":
            sessions.pop(request["session"], None)
            await task
        return answer
    if op == "evaluate":
        from mcpuniverse.benchmark.task import Task

        results = await Task(request["path"]).evaluate(request["answer"])
        return {"results": [{"func": r.config.func, "op": r.config.op, "value": r.config.value, "desc": r.config.desc,
                             "passed": r.passed, "reason": r.reason, "error": r.error[-2000:]} for r in results]}
    if op == "close":
        await close(sessions.pop(request["session"], {}))
        return {"closed": True}
    return {"error": f"unknown op {op!r}"}


async def session(manager, servers: list, ready, queue) -> None:
    """One session's MCP clients, opened, used and closed in this one task (their anyio scopes must not
    interleave with another session's)."""
    clients: dict = {}
    try:
        tools = []
        for name in servers:
            client = await manager.build_client(name, transport="stdio")
            clients[name] = client
            for tool in await client.list_tools():
                tools.append({"name": tool.name, "server": name, "description": tool.description or "",
                              "input_schema": tool.inputSchema or {"type": "object", "properties": {}}})
        ready.set_result(tools)
    except BaseException as exc:  # noqa: BLE001 - handed to the request that opened the session
        await close(clients)
        ready.set_exception(exc)
        return
    while True:
        request, done = await queue.get()
        if request["op"] == "close":
            await close(clients)
            done.set_result({"closed": True})
            return
        try:
            result = await clients[request["server"]].execute_tool(request["tool"], request.get("arguments") or {},
                                                                   retries=1)
            texts = [c.text if getattr(c, "text", None) else json.dumps(c.model_dump(), default=str)
                     for c in (getattr(result, "content", None) or [])]
            done.set_result({"ok": not bool(getattr(result, "isError", False)), "text": "\n".join(texts)})
        except Exception as exc:  # noqa: BLE001 - the call's failure, named, to its caller
            done.set_exception(exc)


async def close(clients: dict) -> None:
    for client in reversed(list(clients.values())):
        try:
            await client.cleanup()
        except Exception:  # noqa: BLE001 - a server that is already gone
            pass


if __name__ == "__main__":
    asyncio.run(serve())
