"""Numeric settings from the environment (`AWM_*`), read by one helper that names a bad value.

Also the resource bounds of processes that run generated code, each one setting with a default:
the largest tool answer that may leave a worker, the largest request an agent may send, and the
size of a sandboxed worker's scratch space (its private `/tmp` and `/dev/shm`) per role.
"""

from __future__ import annotations

import os

DEFAULT_MAX_ANSWER_BYTES = 1 << 20  # 1 MiB: far above a real tool answer, far below what a pool holds in flight
DEFAULT_MAX_REQUEST_BYTES = 1 << 20
# Scratch per role, MB of tmpfs (host memory): env hosts and `awm serve` workers, the env check, verifiers.
SCRATCH_ROLES = {"host": 64, "check": 128, "verifier": 64}
DEFAULT_SCRATCH_FILES = 10_000  # files and folders in a worker's tmpfs (each costs kernel memory, ~1 KB)
DEFAULT_WORKER_FDS = 1024  # open descriptors of a sandboxed worker (each socket can queue ~220 KB of kernel memory)


def env_number(name: str, default: float, kind: type = float) -> float | int:
    """A numeric setting from the environment (`kind` int or float), `default` when unset or empty; a value
    that is not a number is an error naming the variable, not a bare traceback."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return kind(default)
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None


def _positive(name: str, default: int) -> int:
    value = env_number(name, default, int)
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def max_answer_bytes() -> int:
    """`AWM_MAX_ANSWER_BYTES`: a tool answer above it never leaves its worker (an environment error instead)."""
    return _positive("AWM_MAX_ANSWER_BYTES", DEFAULT_MAX_ANSWER_BYTES)


def max_request_bytes() -> int:
    """`AWM_MAX_REQUEST_BYTES`: a tool call's arguments above it are refused (an agent error, HTTP 413)."""
    return _positive("AWM_MAX_REQUEST_BYTES", DEFAULT_MAX_REQUEST_BYTES)


def scratch_mb(role: str) -> int:
    """`AWM_SCRATCH_MB_<ROLE>` (else `AWM_SCRATCH_MB`, else the role's default): MB of each tmpfs of a
    sandboxed worker of `role` ("host", "check", "verifier")."""
    if role not in SCRATCH_ROLES:
        raise ValueError(f"unknown scratch role {role!r} (known: {', '.join(SCRATCH_ROLES)})")
    specific = f"AWM_SCRATCH_MB_{role.upper()}"
    if os.environ.get(specific, "").strip():
        return _positive(specific, SCRATCH_ROLES[role])
    return _positive("AWM_SCRATCH_MB", SCRATCH_ROLES[role])


def scratch_files() -> int:
    """`AWM_SCRATCH_FILES`: files and folders a sandboxed worker may keep in its tmpfs (its parent ends it beyond)."""
    return _positive("AWM_SCRATCH_FILES", DEFAULT_SCRATCH_FILES)


def worker_fds() -> int:
    """`AWM_WORKER_FDS`: open file descriptors of a sandboxed worker (RLIMIT_NOFILE): a socket pair queues
    ~220 KB of kernel memory that no other limit counts, so descriptors bound that memory."""
    return _positive("AWM_WORKER_FDS", DEFAULT_WORKER_FDS)
