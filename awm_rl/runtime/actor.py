"""The Ray actor that hosts environment instances: a `MultiHost` behind one batched entry point.

Every request from the client pool arrives as a batch of operations (`run_batch`), so one Ray round
trip carries many tool calls; each operation answers on its own (an error in one never fails the
batch). The actor applies the worker limits at start (address-space cap, resident-set watchdog,
network refused while generated code runs) and is declared with unlimited restarts: when the
watchdog ends it (a handler that cannot be stopped), Ray starts a fresh incarnation and the
instances it held answer "not hosted here" as Environment Errors.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import time
import warnings
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from awm_rl.runtime.host import MultiHost, ToolResult, environment_error


@dataclass(slots=True)
class OpError:
    """An operation that failed; `kind` is "load" (env code did not import), "unknown" or "internal"."""

    kind: str
    message: str


class EnvHost:
    """Actor body (plain class, so it can also run in-process for debugging)."""

    def __init__(self, store_root: str, *, call_timeout_s: float = 10.0, memory_mb: int | None = 6144,
                 rss_cap_mb: int | None = 8192, import_timeout_s: float = 60.0):
        import fastapi  # noqa: F401 - warm the heavy imports so a scenario's cold start is its own cost
        import sqlalchemy  # noqa: F401

        from awm_rl.limits import Watchdog, apply_memory_limit, drop_secrets, install_guard
        from awm_rl.runtime import host as host_mod

        warnings.filterwarnings("ignore")  # generated code trips pydantic/sqlalchemy deprecations
        drop_secrets()  # the driver's API keys are not for generated code
        if memory_mb:
            apply_memory_limit(memory_mb)
        if host_mod._watchdog is None:
            host_mod._watchdog = Watchdog(rss_cap_mb=rss_cap_mb)
        install_guard()
        self.host = MultiHost(store_root, call_timeout_s=call_timeout_s, import_timeout_s=import_timeout_s)
        _warm_up()
        # Loaded code and scenarios are long-lived: keep them out of every cyclic-GC pass, and collect
        # young objects less often (each tool call allocates many short-lived ones).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)

    def info(self) -> dict[str, Any]:
        return {"incarnation": self.host.incarnation, "pid": self.host.pid}

    def stats(self) -> dict[str, Any]:
        return self.host.stats()

    def _one(self, op: tuple) -> Any:
        from awm_rl.runtime.envcode import EnvLoadError
        from awm_rl.runtime.host import UnknownInstanceError

        kind = op[0]
        try:
            if kind == "call":
                return self.host.call_tool(op[1], op[2], op[3])
            if kind == "reset":
                self.host.reset(op[1])
                return None
            if kind == "open":
                self.host.open(op[1])
                return None
            if kind == "release":
                self.host.release(op[1])
                return None
            if kind == "create":
                return self.host.create(op[1], op[2])
            if kind == "load":
                return self.host.load(op[1])
            if kind == "snapshot":
                return self.host.snapshot(op[1], op[2])
            return OpError("internal", f"unknown operation {kind!r}")
        except EnvLoadError as exc:
            return OpError("load", str(exc))
        except UnknownInstanceError as exc:
            return OpError("unknown", str(exc.args[0]))
        except Exception as exc:  # noqa: BLE001 - reported per operation
            if kind == "call":
                return environment_error(f"environment error: {type(exc).__name__}: {exc}", status=500)
            return OpError("internal", f"{type(exc).__name__}: {exc}")

    def run_batch(self, ops: list[tuple]) -> list[Any]:
        """Run operations in order: ("call", iid, tool, args) -> ToolResult, ("reset", iid), ("release", iid),
        ("create", scenario, n) -> [iid], ("load", scenario) -> info, ("snapshot", iid, dir) -> (initial, final)."""
        return [self._one(op) for op in ops]

    def run_batch_timed(self, ops: list[tuple]) -> list[tuple[Any, float, float]]:
        """Like run_batch, with each operation's wall-clock and CPU time inside the host in ms (benchmarks)."""
        out = []
        for op in ops:
            t0, c0 = time.perf_counter(), time.process_time()
            res = self._one(op)
            out.append((res, (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000))
        return out

    def call(self, iid: str, name: str, arguments: Any = None) -> ToolResult:
        return self.host.call_tool(iid, name, arguments)


class _WarmItem(BaseModel):
    a: int = 1


def _warm_up() -> None:
    """Exercise FastAPI/pydantic code paths once, so the first scenario's cold start is not inflated."""
    from fastapi import FastAPI

    from awm_rl.runtime.asgi import asgi_request
    from awm_rl.runtime.tools import build_tool_routes

    app = FastAPI()

    @app.post("/x/{i}", operation_id="x")
    async def x(i: int, item: _WarmItem) -> _WarmItem:  # noqa: ARG001
        return item

    build_tool_routes(app)
    asyncio.run(asgi_request(app, "POST", "/x/1", b"", b'{"a": 2}'))

    # The ORM path a generated handler takes: routed engine, mapper configuration, a query.
    import sqlalchemy
    from sqlalchemy import Column, Integer
    from sqlalchemy.orm import declarative_base, sessionmaker

    from awm_rl.runtime.db import InstanceConnection, _Slot, current_slot
    from awm_rl.runtime.envcode import install_engine_routing

    install_engine_routing()
    base = declarative_base()

    class Row(base):
        __tablename__ = "warm"
        id = Column(Integer, primary_key=True)

    engine = sqlalchemy.create_engine("sqlite://")
    slot = _Slot()
    slot.conn = sqlite3.connect(":memory:", check_same_thread=False, factory=InstanceConnection)
    token = current_slot.set(slot)
    try:
        base.metadata.create_all(engine)
        session = sessionmaker(bind=engine)()
        session.add(Row(id=1))
        session.commit()
        session.query(Row).filter(Row.id == 1).first()
        session.close()
    finally:
        current_slot.reset(token)
        slot.conn.really_close()


def remote_host_class(**options: Any):
    """The Ray actor class for `EnvHost` (built lazily so importing this module does not import Ray)."""
    import ray

    opts = {"max_restarts": -1, "max_task_retries": 0, "num_cpus": 0, "max_concurrency": 1}
    opts.update(options)
    return ray.remote(**opts)(EnvHost)
