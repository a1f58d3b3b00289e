"""The resource bounds of processes that run generated code, from `awm_resources.settings` (re-exported here
for the runtime's readers), and `env_number` for readers of a numeric variable not yet on the settings object."""

from __future__ import annotations

import os

from awm_resources.settings import (SCRATCH_ROLES, max_answer_bytes, max_request_bytes, scratch_files,  # noqa: F401
                                    scratch_mb, worker_fds)


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
