"""Start and stop `awm serve` (MCP) and `awm serve --openenv` as subprocesses for the tests that drive them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

AWM = Path(sys.executable).with_name("awm")


def serve_cmd(*args: str) -> list[str]:
    """The `awm` console script when installed, else the same entry point as a module."""
    if AWM.is_file():
        return [str(AWM), "serve", *args]
    return [sys.executable, "-m", "awm_rl.runtime.commands", "serve", *args]


def start_serve(store_root: Path, scenario: str, *args: str, env: dict[str, str] | None = None
                ) -> tuple[subprocess.Popen, str]:
    """`awm serve scenario --port 0` on `store_root`; (the process, its MCP URL) once it says where it listens."""
    proc = subprocess.Popen(serve_cmd(scenario, "--port", "0", "--home", str(store_root), *args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    deadline = time.monotonic() + 90
    line = ""
    while time.monotonic() < deadline and "awm serve:" not in line and proc.poll() is None:
        line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
    if not m:
        proc.kill()
        raise AssertionError(f"awm serve did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, m.group(1)


def stop_serve(proc: subprocess.Popen, timeout_s: float = 15) -> float | None:
    """SIGTERM; the seconds the server took to end, or None when it had to be killed after `timeout_s`."""
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    return time.monotonic() - t


@contextlib.contextmanager
def openenv_server(store_root: Path, ray_address: str, *args: str) -> Iterator[tuple[str, subprocess.Popen, str]]:
    """`awm serve --openenv --port 0` on `store_root`, joined to the session's Ray cluster: (its http base, the
    process, the line where it says where it listens); stopped with SIGINT (killed after 30 s) when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "awm_assets.cli", "serve", "--openenv", "--port", "0",
                             "--home", str(store_root), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": ray_address})
    try:
        assert proc.stdout is not None and proc.stderr is not None
        deadline, line = time.monotonic() + 120, ""
        while time.monotonic() < deadline and "awm serve --openenv:" not in line and proc.poll() is None:
            line = proc.stdout.readline()
        m = re.search(r"ws://127\.0\.0\.1:(\d+)/ws", line)
        if not m:
            proc.kill()
            raise AssertionError(f"awm serve --openenv did not start: {line!r} {proc.stderr.read()[-3000:]}")
        yield f"http://127.0.0.1:{m.group(1)}", proc, line
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
