"""The environment behind `awm serve`: one scenario in a replaceable worker process, one instance served.

The `awm serve` process runs no generated code. It holds the MCP front (fastmcp, uvicorn) and an
`IsolatedHost` whose worker (bubblewrap + seccomp where available, else a plain child process under
the Python-level guards) imports the scenario and runs every call, as a pool host does. So one bad call
cannot end the service: a handler that times out is interrupted in the worker (the instance is recycled,
as in the pool), and when the worker itself ends (its watchdog after a handler it could not stop, a
crash, the memory cap) the call fails with an environment error that says so, a fresh worker is
started and the instance is created again, its database reset to the initial state; the next call is
served. Calls and resets take one lock, so they run one at a time in order (a reset waits for the calls
in flight; concurrent calls never share a transaction).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jsonschema import Draft202012Validator

from awm_rl.runtime.actor import IsolatedHost
from awm_rl.runtime.output_schemas import OutputSchema
from awm_rl.runtime.protocol import (
    CallOp,
    CreateOp,
    LoadOp,
    Operation,
    OpError,
    OutputSchemasOp,
    ResetOp,
    ToolResult,
    environment_error,
)


class ServeLoadError(RuntimeError):
    """The scenario could not be loaded into a worker (its import failed or crashed)."""


class ServedEnvironment:
    """One scenario's tools, listing and output schemas, served on one instance in a worker process."""

    def __init__(self, store_root: str, scenario: str, *, call_timeout_s: float, memory_mb: int,
                 import_timeout_s: float = 60.0):
        self.scenario = scenario
        self.host = IsolatedHost(store_root, call_timeout_s=call_timeout_s, memory_mb=memory_mb,
                                 import_timeout_s=import_timeout_s)
        info = self._one(LoadOp(scenario))
        self.tools: list[dict[str, Any]] = info["tools"]
        self.cold_start_ms = float(info.get("cold_start_ms") or 0.0)
        outputs = self._one(OutputSchemasOp(scenario))
        self.outputs = {name: OutputSchema(schema, bool(wrapped), Draft202012Validator(schema))
                        for name, (schema, wrapped) in outputs.items()}
        self.instance = self._one(CreateOp(scenario, 1))[0]
        self.replaced = 0  # workers started again after one ended
        self._lock: asyncio.Lock | None = None
        # calls run one at a time (the lock), so one thread serves them all and stays warm
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="awm-serve-call")

    def _one(self, op: Operation) -> Any:
        res = self.host.run_batch([op])[0]
        if isinstance(res, OpError):
            raise ServeLoadError(res.message)
        return res

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` on the one thread that talks to the worker: one hop per call, no context copy."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def call(self, name: str, arguments: Any, then: Any = None) -> tuple[ToolResult, Any]:
        """(the call's result, `then(result)`), both off the event loop in one hop while the lock is held, so
        answers leave in the order the calls ran."""
        async with self.lock:
            return await self._off_loop(self._call_locked, name, arguments, then)

    def _call_locked(self, name: str, arguments: Any, then: Any) -> tuple[ToolResult, Any]:
        res = self.host.run_batch([CallOp(self.instance, name, arguments)])[0]
        if not isinstance(res, ToolResult):
            res = environment_error(f"environment error: {getattr(res, 'message', res)}", status=500)
        if not self.host.worker_alive(self.scenario):
            said = res.text.rstrip(". ")
            res = environment_error(f"{said}. The environment's worker was replaced: {self._replace()}",
                                    status=res.status if res.status >= 500 else 503)
        return res, (then(res) if then is not None else None)

    async def reset(self) -> None:
        async with self.lock:  # after the calls in flight
            await self._off_loop(self._reset_locked)

    def _reset_locked(self) -> None:
        res = self.host.run_batch([ResetOp(self.instance)])[0]
        if isinstance(res, OpError):  # the worker is gone: a fresh one is the initial state
            self._replace()

    def _replace(self) -> str:
        """A new worker and instance (the caller holds the lock); says what became of the state."""
        self.replaced += 1
        res = self.host.run_batch([CreateOp(self.scenario, 1)])[0]
        if isinstance(res, OpError):
            return f"a new one could not start ({res.message}); the next call tries again."
        self.instance = res[0]
        return "the database was reset to its initial state (earlier changes are lost)."

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
        self.host.close()
