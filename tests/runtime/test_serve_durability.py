"""`awm serve` under concurrency, for real (a started server, a fastmcp client): 100 concurrent writes in
one session are all there afterwards with no spurious errors; a reset waits for calls in flight; a
handler that spins after an `await` times out on its own deadline without taking the server down;
SIGTERM stops the server even while a handler hangs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from .conftest import BAD_ENV, make_scenario
from .serving import start_serve, stop_serve

SERVE_ENV = BAD_ENV + '''

@app.post("/notes/slow", operation_id="add_note_slowly", summary="Write, await, then commit")
async def add_note_slowly(body: NoteIn):
    s = SessionLocal()
    s.add(Note(text=body.text))
    s.flush()
    await asyncio.sleep(0.002)
    s.commit()
    s.close()
    return {"ok": True}


@app.post("/notes/sync", operation_id="add_note_sync", summary="A sync handler (runs in a thread)")
def add_note_sync(body: NoteIn):
    s = SessionLocal()
    s.add(Note(text=body.text))
    s.flush()
    time.sleep(0.002)
    s.commit()
    s.close()
    return {"ok": True}


@app.post("/notes/slower", operation_id="add_note_in_a_second", summary="Write, await 1 s, commit")
async def add_note_in_a_second(body: NoteIn):
    s = SessionLocal()
    s.add(Note(text=body.text))
    s.flush()
    await asyncio.sleep(1.0)
    s.commit()
    s.close()
    return {"ok": True}


@app.get("/hang", operation_id="hang_after_await", summary="Spin on the event loop after an await")
async def hang_after_await():
    await asyncio.sleep(0.01)
    while True:
        pass
'''

CALL_TIMEOUT_S = 2.0


def _start(store_root, scenario: str) -> tuple[subprocess.Popen, str]:
    return start_serve(store_root, scenario, "--call-timeout", str(CALL_TIMEOUT_S))


def _stop(proc: subprocess.Popen) -> float:
    """SIGTERM; returns how long the server took to end."""
    took = stop_serve(proc)
    if took is None:
        raise AssertionError("SIGTERM did not stop awm serve within 15 s")
    return took


@pytest.fixture()
def serve_store(tmp_path):
    make_scenario(tmp_path, "serve_env", SERVE_ENV)
    return tmp_path


def test_100_concurrent_writes_are_all_durable(serve_store):
    from fastmcp import Client

    proc, url = _start(serve_store, "serve_env")
    try:
        async def session() -> tuple[list, list[str]]:
            async with Client(url, timeout=120) as client:
                tools = ["add_note", "add_note_slowly", "add_note_sync"]
                results = await asyncio.gather(*(
                    client.call_tool(tools[i % 3], {"text": f"w{i}"}, raise_on_error=False)
                    for i in range(100)))
                listed = await client.call_tool("list_notes", {"limit": 500})
                return results, [n["text"] for n in json.loads(listed.content[0].text)["notes"]]

        results, texts = asyncio.run(session())
        errors = [r.content[0].text for r in results if r.is_error]
        assert errors == [], errors[:3]  # no spurious 500s
        missing = {f"w{i}" for i in range(100)} - set(texts)
        assert not missing, f"{len(missing)} acknowledged writes missing: {sorted(missing)[:5]}"
        assert len(texts) == 102  # the two initial notes and every write exactly once
    finally:
        took = _stop(proc)
    assert took < 10


def test_reset_waits_for_calls_in_flight(serve_store):
    from fastmcp import Client

    proc, url = _start(serve_store, "serve_env")
    try:
        async def session() -> tuple[list, list[str]]:
            async with Client(url, timeout=120) as client:
                done_at = {}

                async def timed(name, coro):
                    res = await coro
                    done_at[name] = time.monotonic()
                    return res

                async def reset_soon():
                    await asyncio.sleep(0.2)  # the write is in flight (between its flush and its commit)
                    return await timed("reset", client.call_tool("reset_environment", {}))

                results = await asyncio.gather(
                    timed("write", client.call_tool("add_note_in_a_second", {"text": "in flight"},
                                                    raise_on_error=False)), reset_soon())
                # (the two answers come back on separate HTTP streams, so on a loaded machine either can reach
                # the client tens of ms first; a reset that did not wait would be back about 0.8 s before the write)
                assert done_at["reset"] >= done_at["write"] - 0.3
                listed = await client.call_tool("list_notes", {})
                return results, [n["text"] for n in json.loads(listed.content[0].text)["notes"]]

        results, texts = asyncio.run(session())
        assert not any(r.is_error for r in results), results
        assert texts == ["first", "second"]  # the reset ran after the write had committed
    finally:
        _stop(proc)


def test_handler_spinning_after_await_gets_its_own_deadline(serve_store):
    from fastmcp import Client

    proc, url = _start(serve_store, "serve_env")
    try:
        async def session() -> tuple[list, float, bool]:
            async with Client(url, timeout=120) as client:
                t = time.monotonic()
                hung = await asyncio.gather(*(client.call_tool("hang_after_await", {}, raise_on_error=False)
                                              for _ in range(2)))
                took = time.monotonic() - t
                await client.call_tool("reset_environment", {})
                ok = await client.call_tool("add_note", {"text": "after the hang"}, raise_on_error=False)
                return hung, took, not ok.is_error

        hung, took, still_serving = asyncio.run(session())
        assert all(r.is_error and "did not return within" in r.content[0].text for r in hung), hung
        assert took < 2 * CALL_TIMEOUT_S + 6  # each call its own deadline (run one after the other)
        assert still_serving and proc.poll() is None
    finally:
        took = _stop(proc)
    assert took < 10


def test_sigterm_stops_the_server_while_a_handler_hangs(serve_store):
    from fastmcp import Client

    proc, url = _start(serve_store, "serve_env")

    async def fire() -> None:
        async with Client(url, timeout=60) as client:
            await client.call_tool("hang_after_await", {}, raise_on_error=False)

    async def main() -> float:
        task = asyncio.create_task(fire())
        await asyncio.sleep(0.5)  # the handler is spinning now
        took = await asyncio.to_thread(_stop, proc)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return took

    assert asyncio.run(main()) < 10
