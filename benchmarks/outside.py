"""Two parts of `awm bench serve` that an outside caller pays: a call through `awm serve`, and a verdict.

- `serve_vs_pool`: one scenario served by `awm serve` (a subprocess, streamable HTTP) and driven by fastmcp's
  client and by the plain `mcp` client, interleaved call by call with the pool's own call on an instance of the
  same scenario (so the three see the same machine load): a read tool call and a reset, p50/p99 each, and how
  far each client's p50 is above the pool's.
- `verdicts`: code-mode verifications of fresh episodes (a new pool instance each, a write applied, its
  snapshot judged by `run_verifiers`, whose sandboxes stay warm), against a fresh sandbox per verdict (what a
  verdict cost when every `run_verifiers` call started its own), p50/p99 each.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SERVE_START_S = 120.0  # `awm serve` imports the scenario in its sandboxed worker before it says where it listens


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _start_serve(store_root: Path, scenario: str, call_timeout_s: float) -> tuple[subprocess.Popen, str]:
    """`awm serve SCENARIO --port 0`; (the process, its MCP URL) once it says where it listens."""
    cmd = [sys.executable, "-m", "awm_rl.runtime.commands", "serve", scenario, "--port", "0", "--home",
           str(store_root), "--call-timeout", str(call_timeout_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + SERVE_START_S
    line = ""
    assert proc.stdout is not None
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        found = re.search(r"(http://[\d.]+:\d+/mcp)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    err = proc.stderr.read()[-1500:] if proc.stderr else ""
    raise RuntimeError(f"awm serve {scenario} did not start: {line.strip()!r} {err.strip()}")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve_vs_pool(pool: Any, store_root: Path, scenario: str, read: dict[str, Any], *, calls: int,
                  call_timeout_s: float) -> dict[str, Any]:
    """Per-call cost through `awm serve` with both clients against the pool's own, interleaved (see module
    docstring). `read` is a read call of the workload ({"tool", "args"}). Raises RuntimeError on a failed call."""
    from fastmcp import Client
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    tool, args = read["tool"], read["args"]
    samples: dict[str, dict[str, list[float]]] = {side: {"call": [], "reset": []} for side in ("pool", "fastmcp", "mcp")}
    proc, url = _start_serve(store_root, scenario, call_timeout_s)
    handle = pool.acquire(scenario)
    try:
        async def run() -> None:
            async with Client(url) as fast, streamable_http_client(url) as (r, w), ClientSession(r, w) as plain:
                await plain.initialize()

                def pool_call() -> None:
                    res = pool.call_tool(handle, tool, args)
                    if not res.ok:
                        raise RuntimeError(f"pool call {tool} failed: {res.text[:200]}")

                async def fast_call(name: str, arguments: dict[str, Any]) -> None:
                    res = await fast.call_tool(name, arguments, raise_on_error=False)
                    if res.is_error:
                        raise RuntimeError(f"awm serve (fastmcp client) {name} failed: {res.content[0]}")

                async def plain_call(name: str, arguments: dict[str, Any]) -> None:
                    res = await plain.call_tool(name, arguments)
                    if res.is_error:
                        raise RuntimeError(f"awm serve (mcp client) {name} failed: {res.content[0]}")

                ops = {
                    "call": (pool_call, lambda: fast_call(tool, args), lambda: plain_call(tool, args)),
                    "reset": (lambda: pool.reset(handle), lambda: fast_call("reset_environment", {}),
                              lambda: plain_call("reset_environment", {})),
                }
                for i in range(calls + 5):  # the first 5 rounds warm every path up and are not kept
                    for kind, (on_pool, on_fast, on_plain) in ops.items():
                        t0 = time.perf_counter()
                        on_pool()
                        t1 = time.perf_counter()
                        await on_fast()
                        t2 = time.perf_counter()
                        await on_plain()
                        t3 = time.perf_counter()
                        if i >= 5:
                            for side, took in (("pool", t1 - t0), ("fastmcp", t2 - t1), ("mcp", t3 - t2)):
                                samples[side][kind].append(took * 1000)

        asyncio.run(run())
    finally:
        pool.release(handle)
        _stop(proc)
    out: dict[str, Any] = {"scenario": scenario, "tool": tool, "calls": calls, "url_path": "/mcp"}
    for side, kinds in samples.items():
        out[side] = {f"{kind}_ms_{q}": f(values) for kind, values in kinds.items()
                     for q, f in (("p50", _p50), ("p99", lambda v: _pct(v, 0.99)))}
    over = {f"{client}_{kind}": round(out[client][f"{kind}_ms_p50"] - out["pool"][f"{kind}_ms_p50"], 3)
            for client in ("fastmcp", "mcp") for kind in ("call", "reset")}
    out["over_pool_ms_p50"] = over
    out["within_2ms_of_pool"] = all(v <= 2.0 for v in over.values())
    return out


def _code_verifier(store: Any, scenarios: list[str]) -> tuple[str, int, str] | None:
    """(scenario, task index, code) of the first code-mode verifier among `scenarios`."""
    from awm_resources.documents import CODE_FUNCTION
    from awm_rl.reward.tasks import load_tasks

    for scenario in scenarios:
        try:
            records = load_tasks(store, scenario)
        except FileNotFoundError:
            continue
        for record in records:
            entry = record.verifier_for(CODE_FUNCTION)
            if entry is not None:
                return scenario, record.task_idx, entry["code"]
    return None


def verdicts(pool: Any, store: Any, scripts: dict[str, Any], *, count: int, fresh: int,
             timeout_s: float = 10.0) -> dict[str, Any]:
    """Code-mode verdicts on `count` fresh episodes through the warm path, and `fresh` through a new sandbox
    each (see module docstring)."""
    from awm_rl.verification import WARM, VerifierJob, VerifierSandbox, run_verifiers

    found = _code_verifier(store, list(scripts))
    if found is None:
        return {"skipped": "no measured scenario has a code-mode verifier (verify_task_completion)"}
    scenario, task_idx, code = found
    script = scripts[scenario]
    write = script["writes"][0] if script["writes"] else None
    started_before = WARM.started
    warm: list[float] = []
    cold: list[float] = []
    kinds: dict[str, int] = {}
    isolation = None
    for k in range(count + fresh):
        handle = pool.acquire(scenario)  # a fresh episode: a new instance, one write, its own snapshot
        try:
            if write is not None:
                pool.call_tool(handle, write["tool"], {**write["args"], write["field"]: f"verdict-{k}"})
            initial, final = pool.snapshot(handle)
            job = VerifierJob(code=code, initial_db=initial, final_db=final)
            t0 = time.perf_counter()
            if k < count:
                outcome = run_verifiers([job], timeout_s=timeout_s)[0]
            else:
                with VerifierSandbox(timeout_s=timeout_s) as box:
                    outcome = box.run(job)
            took = (time.perf_counter() - t0) * 1000
        finally:
            pool.release(handle)
        (warm if k < count else cold).append(took)
        kind = outcome.verdict or f"error: {outcome.error_kind}"
        kinds[kind] = kinds.get(kind, 0) + 1
        isolation = outcome.isolation
    first, rest = warm[0], warm[1:]
    return {
        "scenario": scenario, "task_idx": task_idx, "verdicts": count, "fresh_sandbox_verdicts": fresh,
        "isolation": isolation, "outcomes": kinds,
        "first_ms": round(first, 2),  # the process's first verdict starts the warm sandbox
        "verify_ms_p50": _p50(rest), "verify_ms_p99": _pct(rest, 0.99),
        "fresh_sandbox_ms_p50": _p50(cold), "fresh_sandbox_ms_p99": _pct(cold, 0.99),
        "ratio_p50_vs_fresh_sandbox": (round(statistics.median(rest) / statistics.median(cold), 4)
                                       if rest and cold else None),
        "sandboxes_started": WARM.started - started_before,
        "method": "each verdict: a new pool instance of the scenario, one write, its (initial, final) snapshot "
                  "judged by run_verifiers (warm sandbox: a forked process and private read-only copies per "
                  "verdict); fresh_sandbox: a new VerifierSandbox per verdict (bubblewrap and an interpreter "
                  "started each time)",
    }
