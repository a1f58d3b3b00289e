"""Process trees and their resident memory: what the benchmarks' own servers, hosts and workers cost."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def process_tree(pid: int) -> list[Any]:
    """The process and its descendants as psutil processes ([] when it is gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def rss_mb(procs: Iterable[Any]) -> float:
    """Summed resident set (MB) of psutil processes or pids; one that ended meanwhile counts 0."""
    import psutil

    total = 0
    for proc in procs:
        try:
            total += (proc if isinstance(proc, psutil.Process) else psutil.Process(proc)).memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20
