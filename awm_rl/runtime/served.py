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

    async def call(self, name: str, arguments: Any, then: Any = None) -> tuple[ToolResult, Any]:
        """(the call's result, `then(result)` run off the event loop while the lock is still held, so
        answers leave in the order the calls ran)."""
        async with self.lock:
            res = await self._call_locked(name, arguments)
            return res, (await asyncio.to_thread(then, res) if then is not None else None)

    async def _call_locked(self, name: str, arguments: Any) -> ToolResult:
        res = (await asyncio.to_thread(self.host.run_batch, [CallOp(self.instance, name, arguments)]))[0]
        if not isinstance(res, ToolResult):
            res = environment_error(f"environment error: {getattr(res, 'message', res)}", status=500)
        if not self.host.worker_alive(self.scenario):
            said = res.text.rstrip(". ")
            res = environment_error(f"{said}. The environment's worker was replaced: {await self._replace()}",
                                    status=res.status if res.status >= 500 else 503)
        return res

    async def reset(self) -> None:
        async with self.lock:  # after the calls in flight
            res = (await asyncio.to_thread(self.host.run_batch, [ResetOp(self.instance)]))[0]
            if isinstance(res, OpError):  # the worker is gone: a fresh one is the initial state
                await self._replace()

    async def _replace(self) -> str:
        """A new worker and instance (the caller holds the lock); says what became of the state."""
        self.replaced += 1
        res = (await asyncio.to_thread(self.host.run_batch, [CreateOp(self.scenario, 1)]))[0]
        if isinstance(res, OpError):
            return f"a new one could not start ({res.message}); the next call tries again."
        self.instance = res[0]
        return "the database was reset to its initial state (earlier changes are lost)."

    def close(self) -> None:
        self.host.close()
