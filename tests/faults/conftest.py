"""Fault-injection fixtures: hostile code needs bubblewrap (the tests fail loudly without it), bait the
attacks go for (a secret in the parent's environment and home directory, a loopback listener, a
sacrificial process, a file outside the scratch folder) and a way to find processes left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def require_bubblewrap():
    """These attacks must fail inside OS isolation: without bubblewrap the suite fails, it never skips."""
    from awm_rl.isolation.sandbox import INSTALL_HINT, isolation_level

    level = isolation_level()
    if level != "bubblewrap":
        pytest.fail(f"OS isolation is not in force ({level}); {INSTALL_HINT}. CI installs it (.ci/run).",
                    pytrace=False)
    return level


@pytest.fixture()
def secret(monkeypatch) -> str:
    """A secret in this (parent) process's environment, as an API key would be."""
    value = f"sk-fault-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWM_FAULT_API_KEY", value)
    monkeypatch.setenv("OPENAI_API_KEY", value)
    return value


@pytest.fixture()
def home_secret():
    """A secret file in the home directory (/root when running as root)."""
    value = f"home-secret-{uuid.uuid4().hex}"
    path = Path.home() / f".awm-fault-{uuid.uuid4().hex[:8]}"
    path.write_text(value)
    path.chmod(0o600)
    yield path, value
    path.unlink(missing_ok=True)


@pytest.fixture()
def victim(tmp_path) -> Path:
    """A file outside any sandbox scratch folder that no hostile code may change."""
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    return path


class Listener:
    """A TCP server on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture()
def listener():
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture()
def sacrificial():
    """A process of the parent's user the hostile code knows the pid of (stands for the raylet/driver)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line or name contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cmdline += " " + Path(f"/proc/{name}/comm").read_text(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(name) != os.getpid():
            found.append(int(name))
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Processes below `pid` (this test process by default)."""
    root = pid or os.getpid()
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            parents[int(name)] = int(fields[1])
    out = []
    for child in parents:
        p = child
        while p in parents and p > 1:
            p = parents[p]
            if p == root:
                out.append(child)
                break
    return out


def wait_gone(marker: str, seconds: float = 3.0) -> list[int]:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        left = processes_with(marker)
        if not left:
            return []
        time.sleep(0.1)
    return processes_with(marker)
