"""Limits for processes that run generated (untrusted) code: memory cap, per-call deadlines, no network.

Generated environment code and verifiers only ever run in worker processes (the scenario workers of
the Ray host actors and of `awm serve`, the env-code check worker, the verifier worker). This module is what those processes install so
that bad code can only hurt itself:

- `apply_memory_limit(mb)`: RLIMIT_AS set to the current address space plus `mb`, so a runaway
  allocation raises MemoryError inside the handler instead of taking the machine down; a
  resident-set watchdog (`Watchdog`) is the backstop for growth the limit does not see.
- `install_guard()`: a `sys.addaudithook` hook (it cannot be removed once added) that refuses
  socket connects, DNS look-ups, sends and process spawning while untrusted code runs
  (`untrusted()` context, process-wide while armed; `arm_permanently()` for dedicated workers).
- `untrusted_env()` / `drop_secrets()`: generated code never sees API keys or tokens of the
  parent's environment (a subprocess gets a minimal environment; an actor drops them on start).
- `deadline(seconds)`: SIGALRM-based soft timeout that raises `CallTimeout` (a BaseException, so a
  generated `except Exception` cannot swallow it) in the main thread; `Watchdog` hard-exits the
  process if a call overruns its deadline plus a grace period (a hang in C code, or in a thread),
  so the supervisor (Ray) restarts it and callers see an Environment Error instead of hanging.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

_SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "PYTHONPATH", "PYTHONHASHSEED",
             "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def untrusted_env(**extra: str) -> dict[str, str]:
    """A minimal environment for a subprocess running generated code: no keys, tokens or passwords."""
    return {**{k: os.environ[k] for k in _SAFE_ENV if k in os.environ}, **extra}


def drop_secrets() -> None:
    """Remove secret-looking variables from this process's environment (Ray's own RAY_* excepted)."""
    for name in list(os.environ):
        if not name.startswith("RAY_") and any(w in name.upper() for w in _SECRET_WORDS):
            os.environ.pop(name, None)


# Exit status a worker uses when the watchdog kills it (distinguishable in logs / check reports).
WATCHDOG_EXIT_CODE = 86


class CallTimeout(BaseException):
    """Raised inside untrusted code when its deadline passes (BaseException: not swallowed by `except Exception`)."""


class NetworkRefused(PermissionError):
    """Raised when generated code tries to reach the network or spawn a process."""


# --------------------------------------------------------------------------------------------
# audit-hook guard
_REFUSED_EVENTS = frozenset({
    "socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
    "socket.sendto", "socket.sendmsg", "socket.bind",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "pty.spawn", "webbrowser.open",
})
_guard_state = {"installed": False, "depth": 0, "permanent": False}
_guard_lock = threading.Lock()


def _audit_hook(event: str, args: tuple) -> None:
    if event in _REFUSED_EVENTS and (_guard_state["depth"] or _guard_state["permanent"]):
        detail = ""
        if event in ("socket.connect", "socket.sendto", "socket.bind") and len(args) > 1:
            detail = f" to {args[1]!r}"
        elif event == "socket.getaddrinfo" and len(args) > 1:
            detail = f" for {args[0]!r} port {args[1]!r}"
        elif event in ("socket.gethostbyname", "socket.gethostbyaddr") and args:
            detail = f" for {args[0]!r}"
        raise NetworkRefused(f"{event}{detail} refused: generated environment code may not use the network "
                             "or start processes")


def install_guard() -> None:
    """Add the audit hook once per process (idempotent; audit hooks cannot be removed)."""
    with _guard_lock:
        if not _guard_state["installed"]:
            sys.addaudithook(_audit_hook)
            _guard_state["installed"] = True


def arm_permanently() -> None:
    """Refuse network/process events for the rest of this process's life (dedicated worker processes)."""
    install_guard()
    _guard_state["permanent"] = True


@contextmanager
def untrusted() -> Iterator[None]:
    """While inside, every thread of this process is refused network and process spawning."""
    install_guard()
    with _guard_lock:
        _guard_state["depth"] += 1
    try:
        yield
    finally:
        with _guard_lock:
            _guard_state["depth"] -= 1


# --------------------------------------------------------------------------------------------
# memory
def _vm_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def rss_bytes() -> int:
    """Resident set of this process (cheap: one read of /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def apply_memory_limit(extra_mb: int) -> int:
    """Cap the address space at (current + extra_mb); returns the limit in bytes.

    Relative to the current size because interpreters with Ray or torch loaded already map
    gigabytes they never touch; what matters is how much more the generated code may take.
    """
    limit = _vm_bytes() + int(extra_mb) * 2**20
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


# --------------------------------------------------------------------------------------------
# deadlines
def _raise_timeout(signum, frame):  # noqa: ARG001 - signal handler signature
    raise CallTimeout("deadline passed")


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise `CallTimeout` in the main thread after `seconds` (no-op elsewhere or when None)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Watchdog:
    """Backstop thread: hard-exits the process when a call overruns or the resident set passes a cap.

    `begin(what, timeout_s)` / `end()` bracket each untrusted call. The thread polls a few times a
    second; exiting is the only reliable way to stop a handler stuck in C code or in a thread, and
    the supervisor (the host actor or `awm serve`, which start a fresh worker; the check runner) turns the exit
    into an Environment Error for the callers.
    """

    def __init__(self, *, grace_s: float = 2.0, rss_cap_mb: int | None = None, poll_s: float = 0.1):
        self.grace_s = grace_s
        self.rss_cap = rss_cap_mb * 2**20 if rss_cap_mb else None
        self.poll_s = poll_s
        self._what: str | None = None
        self._until = 0.0
        self._thread = threading.Thread(target=self._run, name="awm-watchdog", daemon=True)
        self._thread.start()

    def begin(self, what: str, timeout_s: float | None) -> None:
        self._until = time.monotonic() + (timeout_s or 3600.0) + self.grace_s
        self._what = what

    def end(self) -> None:
        self._what = None

    @contextmanager
    def watch(self, what: str, timeout_s: float | None) -> Iterator[None]:
        self.begin(what, timeout_s)
        try:
            yield
        finally:
            self.end()

    def _die(self, reason: str) -> None:
        try:
            sys.stderr.write(f"awm watchdog: {reason}; exiting so the supervisor restarts this worker\n")
            sys.stderr.flush()
        finally:
            os._exit(WATCHDOG_EXIT_CODE)

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_s)
            what = self._what
            if what is not None and time.monotonic() > self._until:
                self._die(f"{what} did not return within its deadline (plus {self.grace_s:.1f}s grace)")
            if self.rss_cap is not None and rss_bytes() > self.rss_cap:
                self._die(f"resident memory {rss_bytes() / 2**20:.0f} MB passed the cap "
                          f"{self.rss_cap / 2**20:.0f} MB" + (f" during {what}" if what else ""))


def io_limits(max_answer_bytes: int | None = None, max_request_bytes: int | None = None) -> dict[str, int]:
    """What may leave a host (an answer) and come in (the arguments): the given bounds, else the isolation
    settings as this process reads them (`awm_resources.settings`, imported only then: a sandboxed worker is given
    both, by a parent that read the settings, and imports none of them)."""
    if not (max_answer_bytes and max_request_bytes):
        from awm_resources.settings import load_settings

        isolation = load_settings().isolation
        max_answer_bytes = max_answer_bytes or isolation.max_answer_bytes
        max_request_bytes = max_request_bytes or isolation.max_request_bytes
    return {"max_answer_bytes": max_answer_bytes, "max_request_bytes": max_request_bytes}
