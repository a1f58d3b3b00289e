"""The environment pool on real Ray actors, on every corpus environment with env code.

Per environment: load, list every tool, a read call and a write call, snapshot (the write is in the
final database only), reset (the database equals the initial one again). Then isolation across
many instances, FastAPI validation texts, the async API, and the cap.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3

import pytest

from awm_rl.runtime.db import database_digest
from awm_rl.runtime.pool import PoolExhausted, UnknownScenarioError
from awm_rl.runtime.tools import example_arguments, looks_read_only

ENVS = ["content_platform_1", "doordash_drive_delivery_tracking", "etsy_digital_downloads",
        "fortnite_item_shop", "gofundme", "rover"]
# A write tool per environment whose schema examples succeed on the initial data, and the text
# argument we mark to find the row afterwards.
WRITES = {
    "content_platform_1": ("create_playlist", "name"),
    "doordash_drive_delivery_tracking": ("create_address", "line1"),
    "etsy_digital_downloads": ("create_coupon", "code"),
    "fortnite_item_shop": ("add_items_to_wishlist", None),  # no free-text argument: checked by digest only
    "gofundme": ("create_bank_account_payout_method", "bank_name"),
    "rover": ("create_pet", "name"),
}
MARKER = re.compile(r"iso-([a-z0-9_]+)-(\d+)-end")


def _digest(path) -> list:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return database_digest(conn)
    finally:
        conn.close()


def _contains(path, needle: str) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                if any(isinstance(v, str) and needle in v for v in row):
                    return True
        return False
    finally:
        conn.close()


def _markers(path) -> set[tuple[str, int]]:
    """Every (scenario, instance) isolation marker present anywhere in the database."""
    found = set()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                for v in row:
                    if isinstance(v, str):
                        found.update((m.group(1), int(m.group(2))) for m in MARKER.finditer(v))
        return found
    finally:
        conn.close()


def _route_ops(store, key):
    """operation_ids declared in the env code (what the app must expose as tools)."""
    code = (store.scenario_dir(key) / "server.py").read_text()
    return set(re.findall(r"operation_id\s*=\s*['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]", code))


@pytest.mark.parametrize("key", ENVS)
def test_environment_end_to_end(corpus_pool, corpus_store, key):
    pool = corpus_pool
    h = pool.acquire(key)
    try:
        tools = pool.list_tools(h)
        names = {t["name"] for t in tools}
        assert names == _route_ops(corpus_store, key)
        for t in tools:
            assert t["input_schema"]["type"] == "object" and isinstance(t["description"], str)
            json.dumps(t)

        # a read tool answers with JSON
        reads = [t for t in tools if looks_read_only(t["name"]) and example_arguments(t["input_schema"]) is not None]
        read_ok = [pool.call_tool(h, t["name"], example_arguments(t["input_schema"])) for t in reads]
        assert any(r.ok for r in read_ok), [r.text[:200] for r in read_ok]
        good = next(r for r in read_ok if r.ok)
        json.loads(good.text)
        assert good.error_kind is None and good.status == 200

        # a write tool changes this instance's database
        tool, field = WRITES[key]
        spec = next(t for t in tools if t["name"] == tool)
        args = example_arguments(spec["input_schema"])
        marker = f"awm-test-{key}"
        if field:
            args[field] = marker
        initial_before, _ = pool.snapshot(h)
        w = pool.call_tool(h, tool, json.dumps(args))  # arguments as a JSON string, as the agent sends them
        assert w.ok, (w.status, w.text, w.detail)
        initial, final = pool.snapshot(h)
        assert initial == initial_before
        assert _digest(final) != _digest(initial)
        if field:
            assert _contains(final, marker) and not _contains(initial, marker)
        assert initial.stat().st_mode & 0o222 == 0 and final.stat().st_mode & 0o222 == 0  # read-only files

        # reset restores the initial database exactly
        pool.reset(h)
        _, after = pool.snapshot(h)
        assert _digest(after) == _digest(initial)
    finally:
        pool.release(h)


def test_isolation_many_instances(corpus_pool):
    """240 instances (6 envs x 40) each write their own marker: each database holds exactly its own."""
    pool = corpus_pool
    handles = [(key, j, h) for key in ENVS for j, h in enumerate(pool.acquire_many(key, 40))]
    try:
        calls = []
        for key, j, h in handles:
            tool, field = WRITES[key]
            spec = next(t for t in pool.list_tools(h) if t["name"] == tool)
            args = example_arguments(spec["input_schema"])
            if field:
                args[field] = f"iso-{key}-{j}-end"
            calls.append((h, tool, args))
        results = pool.call_many(calls)
        assert all(r.ok for r in results), [r.text[:200] for r in results if not r.ok][:3]

        async def snap_all():
            return await asyncio.gather(*(pool.snapshot_async(h) for _, _, h in handles))
        snaps = asyncio.run(snap_all())
        initial_digest = {}
        for (key, j, _h), (initial, final) in zip(handles, snaps, strict=True):
            initial_digest.setdefault(key, _digest(initial))
            assert _digest(final) != initial_digest[key]
            expected = {(key, j)} if WRITES[key][1] else set()
            assert _markers(final) == expected, f"{key} instance {j}"

        async def reset_all():
            await asyncio.gather(*(pool.reset_async(h) for _, _, h in handles))
        asyncio.run(reset_all())
        for (key, _, _), (_, final) in zip(handles, asyncio.run(snap_all()), strict=True):
            assert _digest(final) == initial_digest[key]
    finally:
        for _, _, h in handles:
            pool.release(h)


def test_validation_errors_match_fastapi(corpus_pool):
    pool = corpus_pool
    h = pool.acquire("rover")
    try:
        r = pool.call_tool(h, "get_booking", {"booking_id": "not-a-number"})
        assert (r.ok, r.status, r.error_kind) == (False, 422, "agent")
        detail = json.loads(r.text)["detail"][0]
        assert detail["loc"] == ["path", "booking_id"] and detail["type"] == "int_parsing"

        r = pool.call_tool(h, "create_pet", {})
        assert r.status == 422
        missing = {tuple(d["loc"]) for d in json.loads(r.text)["detail"]}
        assert ("body", "name") in missing

        r = pool.call_tool(h, "get_booking", {})  # a missing path parameter, in FastAPI's words
        assert r.status == 422 and json.loads(r.text)["detail"][0]["loc"] == ["path", "booking_id"]

        r = pool.call_tool(h, "no_such_tool", {})
        assert (r.status, r.error_kind) == (404, "agent") and "create_pet" in r.text

        r = pool.call_tool(h, "create_pet", "{not json")
        assert (r.status, r.error_kind) == (400, "agent") and "not valid JSON" in r.text
        r = pool.call_tool(h, "create_pet", "[1, 2]")
        assert r.status == 400 and "JSON object" in r.text

        ok = pool.call_tool(h, "list_message_threads", None)  # the instance is still fine
        assert ok.ok
    finally:
        pool.release(h)


def test_unknown_scenario(corpus_pool):
    with pytest.raises(UnknownScenarioError) as err:
        corpus_pool.acquire("no_such_place")
    assert "no_such_place" in str(err.value) and "rover" in str(err.value)
    with pytest.raises(UnknownScenarioError):  # imported, but without env code
        corpus_pool.acquire("e_commerce_33")
    with pytest.raises(UnknownScenarioError):
        corpus_pool.acquire("../etc")


def test_async_api_overlaps_calls(corpus_pool):
    pool = corpus_pool

    async def main():
        handles = await asyncio.gather(*(pool.acquire_async("doordash_drive_delivery_tracking") for _ in range(16)))
        try:
            results = await asyncio.gather(*(pool.call_tool_async(h, "list_drivers", {}) for h in handles for _ in range(4)))
            assert len(results) == 64 and all(r.ok for r in results)
            assert len({r.text for r in results}) == 1  # same initial data everywhere
        finally:
            await asyncio.gather(*(pool.release_async(h) for h in handles))
    asyncio.run(main())


def test_released_handle_is_refused(corpus_pool):
    h = corpus_pool.acquire("gofundme")
    corpus_pool.release(h)
    with pytest.raises(Exception, match="released"):
        corpus_pool.call_tool(h, "fetch_my_donation_history", {})


def test_cap_on_instances(corpus_store):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(corpus_store.root, num_hosts=1, max_instances=2, prefetch=0, acquire_timeout_s=0.5) as pool:
        a, b = pool.acquire("rover"), pool.acquire("rover")
        with pytest.raises(PoolExhausted, match="2 instances"):
            pool.acquire("rover")
        pool.release(a)
        c = pool.acquire("rover")  # a released slot is reusable
        assert pool.call_tool(c, "list_message_threads", {}).ok
        pool.release(b)
        pool.release(c)
