"""Two parts of `awm bench serve` that an outside caller pays: a call through `awm serve`, and a verdict.

- `serve_vs_pool`: one scenario served by `awm serve` (a subprocess, streamable HTTP) and driven by fastmcp's
  client and by the plain `mcp` client, interleaved call by call with the pool's own call on an instance of the
  same scenario (so the three see the same machine load): a read tool call and a reset, p50/p99 each, and how
  far each client's p50 is above the pool's.
- `verdicts`: code-mode verifications of fresh episodes (a new pool instance each, a write applied, its
  snapshot judged by `run_verifiers`, whose sandboxes stay warm), against a fresh sandbox per verdict (what a
  verdict cost when every `run_verifiers` call started its own), p50/p99 each.
- `openenv_vs_pool`: any server speaking OpenEnv's session protocol at a URL the user gives (OpenEnv's own Agent
  World Model server, or `awm serve --openenv`), driven over its WebSocket `/ws` with plain JSON messages (the
  `websockets` package; none of OpenEnv's code in this process), interleaved with the pool on the same scenario:
  reset and a read tool call p50/p99, N sessions opened at once (wall), and, given the server's PID on this
  machine, memory per extra session (RSS of its process tree before/after opening them).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import process_tree, rss_mb

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
    from awm_rl.isolation.verification import WARM, VerifierJob, VerifierSandbox, run_verifiers

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


# ---------------------------------------------------------------------------------------------
# an OpenEnv-protocol server as a baseline
OPENENV_TIMEOUT_S = 60.0  # one reset or call on the user's server (OpenEnv's AWM server starts a process per reset)


def openenv_urls(url: str) -> tuple[str, str]:
    """(http base, WebSocket URL) of an OpenEnv server given as http(s)://host:port[/ws] or ws(s)://host:port[/ws]."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"--openenv-url {url!r} is not an http(s):// or ws(s):// address with a host")
    path = parts.path.rstrip("/")
    path = path[: -len("/ws")] if path.endswith("/ws") else path
    secure = parts.scheme in ("https", "wss")
    return (f"{'https' if secure else 'http'}://{parts.netloc}{path}",
            f"{'wss' if secure else 'ws'}://{parts.netloc}{path}/ws")


def openenv_health(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The server's `GET /health` answer; ValueError (one line, saying what failed) when it does not answer."""
    import urllib.error
    import urllib.request

    base, _ = openenv_urls(url)
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout_s) as resp:
            body = resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ValueError(f"no OpenEnv server answers at {base}/health within {timeout_s:g} s: "
                         f"{getattr(exc, 'reason', exc)}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise ValueError(f"{base}/health did not answer JSON: {body[:200]!r}") from None
    return answer if isinstance(answer, dict) else {"answer": answer}


def rss_tree_mb(pid: int) -> float:
    import psutil

    try:
        psutil.Process(pid)
    except psutil.Error as exc:
        raise ValueError(f"--openenv-pid {pid}: {exc}") from None
    return rss_mb(process_tree(pid))


class _OpenEnvSession:
    """One WebSocket session on an OpenEnv server: reset, step, close, each answer awaited at most `timeout_s`."""

    def __init__(self, ws_url: str, timeout_s: float):
        self.ws_url, self.timeout_s = ws_url, timeout_s
        self.ws: Any = None

    async def open(self) -> "_OpenEnvSession":
        import websockets

        self.ws = await asyncio.wait_for(websockets.connect(self.ws_url, max_size=None, ping_interval=None,
                                                            open_timeout=self.timeout_s, close_timeout=5),
                                         self.timeout_s)
        return self

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        await self.ws.send(json.dumps(message))
        answer = json.loads(await asyncio.wait_for(self.ws.recv(), self.timeout_s))
        if not isinstance(answer, dict) or answer.get("type") == "error":
            raise RuntimeError(f"{message['type']} answered {str(answer.get('data') if isinstance(answer, dict) else answer)[:300]}")
        return answer.get("data") or {}

    async def reset(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.ask({"type": "reset", "data": params})

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        data = await self.ask({"type": "step", "data": {"type": "call_tool", "tool_name": tool, "arguments": args}})
        error = (data.get("observation") or {}).get("error")
        if error:
            raise RuntimeError(f"call {tool} answered an error: {str(error)[:300]}")
        return data

    async def close(self) -> None:
        if self.ws is None:
            return
        try:
            await asyncio.wait_for(self.ws.send(json.dumps({"type": "close"})), 5)
        except Exception:  # noqa: BLE001 - the server may have closed first
            pass
        await self.ws.close()


def openenv_vs_pool(pool: Any, url: str, scenario: str, read: dict[str, Any], *, task_idx: int | None, calls: int,
                    sessions: int, pid: int | None, timeout_s: float = OPENENV_TIMEOUT_S) -> dict[str, Any]:
    """The OpenEnv-protocol server at `url` against the pool on `scenario` (see module docstring). `read` is a
    read call of the workload ({"tool", "args"}), made on both sides. Raises RuntimeError / ValueError on a
    failed reset or call."""
    base, ws_url = openenv_urls(url)
    tool, args = read["tool"], read["args"]
    params: dict[str, Any] = {"scenario": scenario, **({} if task_idx is None else {"task_idx": task_idx})}
    samples: dict[str, dict[str, list[float]]] = {side: {"reset": [], "call": []} for side in ("pool", "openenv")}
    out: dict[str, Any] = {"url": base, "ws_url": ws_url, "scenario": scenario, "task_idx": task_idx, "tool": tool,
                           "calls": calls, "sessions": sessions, "pid": pid}
    health_before = openenv_health(url)
    out["server_sessions_before"] = health_before.get("sessions")

    async def run() -> None:
        handle = await pool.acquire_async(scenario)
        one = await _OpenEnvSession(ws_url, timeout_s).open()
        resets = 0
        try:
            first = await one.reset(params)
            resets += 1
            out["first_observation"] = {k: v for k, v in (first.get("observation") or {}).items()
                                        if k in ("scenario", "task_idx", "num_tools", "max_steps")}
            for i in range(calls + 3):  # the first 3 rounds warm both paths up and are not kept
                t0 = time.perf_counter()
                await pool.reset_async(handle)
                t1 = time.perf_counter()
                await one.reset(params)
                resets += 1
                t2 = time.perf_counter()
                res = await pool.call_tool_async(handle, tool, args)
                t3 = time.perf_counter()
                await one.call(tool, args)
                t4 = time.perf_counter()
                if not res.ok:
                    raise RuntimeError(f"pool call {tool} failed: {res.text[:200]}")
                if i >= 3:
                    for side, kind, took in (("pool", "reset", t1 - t0), ("openenv", "reset", t2 - t1),
                                             ("pool", "call", t3 - t2), ("openenv", "call", t4 - t3)):
                        samples[side][kind].append(took * 1000)
        finally:
            await one.close()
            await pool.release_async(handle)
        out["resets"] = resets
        out["timed_resets"] = len(samples["openenv"]["reset"])
        out["timed_calls"] = len(samples["openenv"]["call"])

        # N sessions at once: each one connected and reset to the task (the server's cost of a new session)
        await asyncio.sleep(0.5)  # the server may close the session above after its socket is gone
        before_mb = rss_tree_mb(pid) if pid else None
        async def open_one() -> _OpenEnvSession:
            s = _OpenEnvSession(ws_url, timeout_s)
            await s.open()
            await s.reset(params)
            return s
        t0 = time.perf_counter()
        opened = await asyncio.gather(*(open_one() for _ in range(sessions)), return_exceptions=True)
        out["open_sessions_wall_s"] = round(time.perf_counter() - t0, 3)
        live = [s for s in opened if isinstance(s, _OpenEnvSession)]
        failed = [f"{type(e).__name__}: {str(e)[:200]}" for e in opened if isinstance(e, BaseException)]
        out["sessions_opened"] = len(live)
        if failed:
            out["session_errors"] = failed[:5]
        if pid:
            after_mb = rss_tree_mb(pid)
            out["server_rss_mb_before"], out["server_rss_mb_after"] = round(before_mb or 0.0, 1), round(after_mb, 1)
            out["mb_per_extra_session"] = round((after_mb - (before_mb or 0.0)) / max(1, len(live)), 3)
        out["server_sessions_while_open"] = (await asyncio.to_thread(openenv_health, url)).get("sessions")
        await asyncio.gather(*(s.close() for s in live))
        # the server's sessions once closed (a server whose /health does not count sessions reports None)
        left = None
        for _ in range(50):
            left = (await asyncio.to_thread(openenv_health, url)).get("sessions")
            if left is None or left <= (out["server_sessions_before"] or 0):
                break
            await asyncio.sleep(0.1)
        out["server_sessions_after_close"] = left

        # the pool's N instances at once, the same count
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(pool.acquire_async(scenario) for _ in range(sessions)))
        out["pool_open_instances_wall_s"] = round(time.perf_counter() - t0, 3)
        out["pool_instances_opened"] = len(handles)
        await asyncio.gather(*(pool.release_async(h) for h in handles))

    asyncio.run(run())
    for side, kinds in samples.items():
        out[side] = {f"{kind}_ms_{q}": f(values) for kind, values in kinds.items()
                     for q, f in (("p50", _p50), ("p99", lambda v: _pct(v, 0.99)))}
    out["ratio_p50_openenv_over_pool"] = {
        kind: (round(out["openenv"][f"{kind}_ms_p50"] / out["pool"][f"{kind}_ms_p50"], 2)
               if out["pool"][f"{kind}_ms_p50"] else None) for kind in ("reset", "call")}
    out["method"] = ("one WebSocket session on the server and one pool instance of the same scenario, interleaved "
                     "round by round (reset, then the read call, on each side; 3 warm-up rounds not kept); then N "
                     "sessions connected and reset at once against N pool instances acquired at once (one acquire each, as a server opening sessions does); "
                     "memory: RSS of the server's process tree (--openenv-pid) before/after the N sessions, per session")
    return out
