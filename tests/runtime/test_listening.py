"""No delayed-ACK stall on the servers the project runs: their accepted connections have Nagle's algorithm off.

A listening socket made with protocol 0 leaves TCP_NODELAY off on accepted connections (asyncio sets it only
when `sock.proto` says TCP), and an answer written in two parts then waits for the client's delayed ACK, about
40 ms per call. The first tests look at the accepted sockets of a real asyncio server and of uvicorn (what
`awm serve` runs, given the socket the same way); the last times sequential MCP calls to `awm serve` itself.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from awm_rl.runtime.listening import listening_socket, nodelay
from awm_rl.runtime.tools import example_arguments, looks_read_only

from .serving import start_serve, stop_serve


async def _accepted_nodelay(sock: socket.socket) -> bool:
    """Serve on `sock` with asyncio, connect once, and say whether the accepted connection has Nagle off."""
    seen: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.set_result(nodelay(writer.get_extra_info("socket")))
        writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        result = await asyncio.wait_for(seen, 10)
        writer.close()
        return result
    finally:
        server.close()


def test_accepted_connections_have_nagle_off():
    assert asyncio.run(_accepted_nodelay(listening_socket("127.0.0.1", 0))) is True


def test_a_protocol_0_listener_would_stall():
    """The cause, shown: the socket `awm serve` used to make leaves Nagle on (what the fix changes)."""
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    plain.listen(8)
    assert asyncio.run(_accepted_nodelay(plain)) is False


def test_uvicorn_connections_on_the_listening_socket_have_nagle_off():
    """uvicorn serving an ASGI app on the socket, as `awm serve` hands it over (fastmcp's run_http_async)."""
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def main() -> list[bool]:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert b"200" in await reader.readline()
        flags = [nodelay(c.transport.get_extra_info("socket")) for c in server.server_state.connections]
        writer.close()
        server.should_exit = True
        await serving
        return flags

    flags = asyncio.run(main())
    assert flags == [True]


def test_listening_socket_names_a_port_in_use():
    taken = listening_socket("127.0.0.1", 0)
    with pytest.raises(OSError):
        listening_socket("127.0.0.1", taken.getsockname()[1])
    taken.close()


async def _a_read_call(client) -> tuple[str, dict]:
    """A read tool of the served scenario and example arguments it answers without error."""
    for tool in await client.list_tools():
        args = example_arguments(tool.input_schema)
        if looks_read_only(tool.name) and args is not None:
            if not (await client.call_tool(tool.name, args, raise_on_error=False)).is_error:
                return tool.name, args
    raise AssertionError("no read tool of the served scenario answers its example arguments")


def test_awm_serve_answers_sequential_calls_without_the_stall(corpus_store):
    """20 sequential MCP calls (a read, a reset) with fastmcp's client: with the stall every one takes 40 ms or
    more; without it the fastest is a few ms even on a loaded machine."""
    from fastmcp import Client

    proc, url = start_serve(corpus_store.root, "gofundme")
    try:
        async def session() -> list[float]:
            async with Client(url) as client:
                read = await _a_read_call(client)
                took = []
                for _ in range(10):
                    for name, args in (read, ("reset_environment", {})):
                        t0 = time.perf_counter()
                        result = await client.call_tool(name, args, raise_on_error=False)
                        took.append((time.perf_counter() - t0) * 1000)
                        assert not result.is_error, result.content[0].text
                return took
        took = asyncio.run(session())
    finally:
        stop_serve(proc)
    assert min(took) < 30, f"every call took 30 ms or more (delayed-ACK stall?): {sorted(took)[:5]}"
    assert sorted(took)[len(took) // 2] < 40, f"most calls took 40 ms or more: {sorted(took)}"
