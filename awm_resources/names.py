"""Scenario name normalisation: the join key of every AWM file and our partition key."""

from __future__ import annotations

import re

_OUTSIDE = re.compile(r"[^a-z0-9_]")
_RUNS = re.compile(r"_+")


def normalize_scenario_name(name: str) -> str:
    """Lowercase, non-[a-z0-9_] to `_`, collapse runs, strip edges (the AWM dataset's rule)."""
    key = _RUNS.sub("_", _OUTSIDE.sub("_", name.lower())).strip("_")
    if not key:
        raise ValueError(f"scenario name {name!r} normalises to an empty key")
    return key


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def policy_slug(policy: str, max_len: int = 80) -> str:
    """A folder name for a policy string (`chat:openai/gpt-5` -> `chat_openai_gpt-5`), for evaluation outputs."""
    return _UNSAFE.sub("_", policy).strip("_")[:max_len] or "policy"
