"""Start and stop `awm serve` as a subprocess for the tests that drive it over MCP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
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
