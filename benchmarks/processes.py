"""Process trees and their memory: what the benchmarks' own servers, hosts and workers cost.

Resident sets of process trees, the processes of the local Ray node, and rss / pss / uss per process (PSS splits
shared pages among the processes that map them, so its totals add up to the memory actually used)."""

from __future__ import annotations

import os
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


def ray_node_processes() -> dict[int, str]:
    """pid -> role for every process of the local Ray node started by this driver (empty if remote)."""
    import psutil
    import ray._private.worker as ray_worker

    node = getattr(ray_worker, "_global_node", None)
    out: dict[int, str] = {}
    if node is None:
        return out
    try:
        live = node.live_processes()
    except Exception:  # noqa: BLE001 - Ray private API: no process list means no per-process figures
        return out
    for role, proc in live:
        out[proc.pid] = role
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                out.setdefault(child.pid, "worker")
        except psutil.Error:
            pass
    return out


def with_descendants(pids: list[int]) -> list[int]:
    """The pids and those of all their descendants (a process that ended meanwhile contributes none)."""
    import psutil

    out = list(pids)
    for pid in pids:
        try:
            out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            pass
    return out


def memory_by_process(roles: dict[int, str]) -> list[dict[str, Any]]:
    """rss / pss / uss (MB) per process with its role (and, for a sandboxed one, its scenario). PSS splits
    each shared page among the processes that map it, so PSS totals add up to the memory actually used; RSS
    totals count shared pages (the interpreter, libraries) once per process."""
    import psutil

    rows = []
    for pid, role in roles.items():
        try:
            proc = psutil.Process(pid)
            full = proc.memory_full_info()
            args = proc.cmdline()
        except psutil.Error:
            continue
        row: dict[str, Any] = {"pid": pid}
        if role == "sandboxed":  # bubblewrap, its PID-1 helper, or the scenario worker it runs
            worker = "awm_rl.runtime.worker" in args  # python -m awm_rl.runtime.worker STORE OPTIONS SCENARIO
            if worker:
                row["scenario"] = args[-1]
            role = (f"scenario worker {args[-1]}" if worker and os.path.basename(args[0]).startswith("python")
                    else "bubblewrap" + (f" ({args[-1]})" if worker else ""))
        rows.append({**row, "role": role, "rss_mb": round(full.rss / 2**20, 1),
                     "pss_mb": round(full.pss / 2**20, 1), "uss_mb": round(full.uss / 2**20, 1)})
    return rows
