"""Hostile environment code behind `awm serve`: the server runs the MCP front only and the scenario in a
bubblewrap'd worker it started; the handler's attacks fail there while the server keeps answering."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from .conftest import Listener, wait_gone
from .test_env_host_attacks import HOSTILE_ENV


def test_awm_serve_contains_hostile_code(tmp_path, home_secret, victim):
    from fastmcp import Client

    from tests.runtime.conftest import make_scenario
    from tests.runtime.serving import start_serve, stop_serve

    make_scenario(tmp_path / "store", "hostile_env", HOSTILE_ENV)
    secret = f"sk-serve-fault-{uuid.uuid4().hex}"
    marker = f"4247.{uuid.uuid4().int % 10**6}"
    proc, url = start_serve(tmp_path / "store", "hostile_env", env={"AWM_FAULT_API_KEY": secret})
    listener = Listener()
    path, home_value = home_secret
    try:
        # the server runs no generated code itself: its worker is a bubblewrap sandbox it started
        children = [c for task in Path(f"/proc/{proc.pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
        assert any(Path(f"/proc/{c}/exe").resolve().name == "bwrap" for c in children), children

        async def session() -> dict:
            async with Client(url) as client:
                res = await client.call_tool("attack", {"pid": proc.pid, "port": listener.port,
                                                        "home_file": str(path), "victim": str(victim),
                                                        "marker": marker}, raise_on_error=False)
                assert not res.is_error, res.content[0].text
                notes = await client.call_tool("list_notes", {}, raise_on_error=False)
                assert not notes.is_error  # still serving
                return json.loads(res.content[0].text)

        seen = asyncio.run(session())
        text = json.dumps(seen)
        assert secret not in text and home_value not in text
        # (only the scenario's folder is mounted, read-only; a write beside it lands in the private /tmp)
        assert not (tmp_path / "store" / "scenarios" / "pwned.txt").exists()
        for name in ("home", "project", "loopback", "kill_actor", "own_code", "ray_session"):
            assert seen[name].startswith("FAILED"), (name, seen[name])
        assert seen["visible"].startswith("OK [1, 2"), seen["visible"]
        assert listener.accepted == 0
        assert proc.poll() is None
        assert victim.read_text() == "keep me"
    finally:
        listener.close()
        stop_serve(proc)
    assert wait_gone(marker) == [], "a process started by the served code outlived the server"
