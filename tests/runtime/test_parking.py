"""Idle instances beyond `max_open_instances` are parked (their database kept as an image, the connection
closed) and reopened on their next call: nothing an instance wrote is lost or mixed up on the way, and a
parked instance resets, snapshots and releases like an open one. Through a real pool (Ray host actor,
sandboxed scenario worker) whose budget is 2 open instances; the pool's placement on the corpus pool."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from tests.runtime.conftest import BAD_ENV, make_scenario


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    from awm_rl.runtime.pool import EnvironmentPool

    root = tmp_path_factory.mktemp("parking")
    make_scenario(root, "notes_env", BAD_ENV)
    pool = EnvironmentPool(root, num_hosts=1, prefetch=0, max_open_instances=2)
    yield pool
    pool.close()


def _notes(pool, h) -> list[str]:
    res = pool.call_tool(h, "list_notes", {})
    assert res.ok, res.text
    return sorted(n["text"] for n in json.loads(res.text)["notes"])


def _file_notes(path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT text FROM notes"))
    finally:
        conn.close()


def _counts(pool) -> tuple[int, int]:
    stats = pool.host_stats()[0]["scenarios"]["notes_env"]
    return stats["live_dbs"], stats["parked_dbs"]


def test_parked_instances_keep_their_own_writes(small_pool):
    pool = small_pool
    handles = pool.acquire_many("notes_env", 6)
    try:
        initial = _notes(pool, handles[0])
        for i, h in enumerate(handles):
            assert pool.call_tool(h, "add_note", {"text": f"mine-{i}"}).ok
        live, parked = _counts(pool)
        assert live <= 2 and parked >= 4, (live, parked)
        # every instance, parked or open, still holds exactly its own write (reopening parks others in turn)
        for _ in range(2):
            for i, h in enumerate(handles):
                assert _notes(pool, h) == sorted(initial + [f"mine-{i}"])
        # a snapshot of a parked instance is its parked image
        init_file, final_file = pool.snapshot(handles[0])
        assert _file_notes(final_file) == sorted(initial + ["mine-0"])
        assert _file_notes(init_file) == initial
        # reset of a parked instance: back to the shared initial database (no image kept)
        pool.reset(handles[1])
        assert _notes(pool, handles[1]) == initial
    finally:
        for h in handles:
            pool.release(h)
    for _ in range(50):  # releases are sent without waiting for their answer
        if _counts(pool) == (0, 0):
            break
        time.sleep(0.1)
    assert _counts(pool) == (0, 0)


def test_read_only_instances_are_parked_without_an_image(small_pool):
    pool = small_pool
    handles = pool.acquire_many("notes_env", 5)
    try:
        for h in handles:
            _notes(pool, h)
        assert _counts(pool) == (2, 0)
    finally:
        for h in handles:
            pool.release(h)


@pytest.mark.slow
def test_pool_keeps_a_scenario_on_one_host_until_its_share(corpus_pool):
    """acquire_many places a scenario's instances with its worker (one process), not on every host."""
    pool = corpus_pool
    handles = pool.acquire_many("gofundme", 30)
    try:
        assert len({h.host for h in handles}) == 1
    finally:
        for h in handles:
            pool.release(h)
