"""The Ray actor that hosts environment instances: a `MultiHost` behind one batched entry point.

Every request from the client pool arrives as a batch of operations (`run_batch`), so one Ray round
trip carries many tool calls; each operation answers on its own (an error in one never fails the
batch). The actor is declared with unlimited restarts: when its host ends (a handler that cannot be
stopped, a crash), Ray starts a fresh incarnation and the instances it held answer "not hosted here"
as Environment Errors.

Where bubblewrap is available (`awm_rl.runtime.sandbox`), generated code never runs in the actor:
the actor starts one isolated worker process (`python -m awm_rl.runtime.actor`, in bubblewrap: no
network, read-only system and store, its own PID namespace, a clean environment, uid nobody) that
imports the scenarios and serves the batches; the actor forwards each batch over a pipe (JSON with
a length prefix, never pickle: the worker is untrusted) and writes snapshot files itself from the
database images the worker returns. When the worker ends, the actor ends too, so Ray restarts both.
Without bubblewrap the host runs in the actor process under the Python-level limits only (address-
space cap, resident-set watchdog, network refused while generated code runs), as `isolation` says.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from awm_rl.runtime.host import MultiHost, ToolResult, environment_error


@dataclass(slots=True)
class OpError:
    """An operation that failed; `kind` is "load" (env code did not import), "unknown" or "internal"."""

    kind: str
    message: str


class EnvHost:
    """Actor body (plain class, so it can also run in-process for debugging).

    `isolate`: run the host in a bubblewrap'd worker process behind a pipe (default: when bubblewrap
    is available); False runs it in this process (Python-level guards only).
    """

    def __init__(self, store_root: str, *, call_timeout_s: float = 10.0, memory_mb: int | None = 6144,
                 rss_cap_mb: int | None = 8192, import_timeout_s: float = 60.0, isolate: bool | None = None):
        from awm_rl.limits import drop_secrets
        from awm_rl.runtime.sandbox import isolation_level, sandbox_available

        self._worker: _IsolatedWorker | None = None
        self.isolation = "none: host runs in this process (isolate=False)"
        if isolate is None:
            isolate = sandbox_available()
            if not isolate:
                self.isolation = isolation_level()
        if isolate:
            drop_secrets()
            self.isolation = isolation_level()
            self._worker = _IsolatedWorker(store_root, dict(call_timeout_s=call_timeout_s, memory_mb=memory_mb,
                                                            rss_cap_mb=rss_cap_mb, import_timeout_s=import_timeout_s))
            return
        self._init_local(store_root, call_timeout_s=call_timeout_s, memory_mb=memory_mb, rss_cap_mb=rss_cap_mb,
                         import_timeout_s=import_timeout_s)

    def _init_local(self, store_root: str, *, call_timeout_s: float, memory_mb: int | None,
                    rss_cap_mb: int | None, import_timeout_s: float) -> None:
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
        if self._worker is not None:
            return {**self._worker.request("info"), "pid": os.getpid(), "isolation": self.isolation}
        return {"incarnation": self.host.incarnation, "pid": self.host.pid, "isolation": self.isolation}

    def stats(self) -> dict[str, Any]:
        if self._worker is not None:
            out = self._worker.request("stats")
            from awm_rl.limits import rss_bytes

            # pid: this actor's (the worker's own pid is 2 in its namespace); memory: both processes.
            out.update(pid=os.getpid(), worker_pid=self._worker.pid, isolation=self.isolation,
                       worker_rss_mb=out.get("rss_mb"), rss_mb=(out.get("rss_mb") or 0) + rss_bytes() / 2**20,
                       pipe_ms_p50=self._worker.pipe_ms_p50())
            return out
        return {**self.host.stats(), "isolation": self.isolation}

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
            if kind == "snapshot_bytes":
                return self.host.snapshot_bytes(op[1])
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
        if self._worker is not None:
            return self._worker.run(ops, timed=False)
        return [self._one(op) for op in ops]

    def run_batch_timed(self, ops: list[tuple]) -> list[tuple[Any, float, float]]:
        """Like run_batch, with each operation's wall-clock and CPU time inside the host in ms (benchmarks)."""
        if self._worker is not None:
            return self._worker.run(ops, timed=True)
        out = []
        for op in ops:
            t0, c0 = time.perf_counter(), time.process_time()
            res = self._one(op)
            out.append((res, (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000))
        return out

    def call(self, iid: str, name: str, arguments: Any = None) -> ToolResult:
        if self._worker is not None:
            return self._worker.run([("call", iid, name, arguments)], timed=False)[0]
        return self.host.call_tool(iid, name, arguments)


# ---------------------------------------------------------------------------------------------
# the isolated host worker and its pipe

_MAX_MESSAGE_BYTES = 1 << 30
_SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}\.db$")


def _encode(value: Any) -> bytes:
    def default(obj: Any) -> Any:
        if isinstance(obj, ToolResult):
            return {"__awm_tool_result__": asdict(obj)}
        if isinstance(obj, OpError):
            return {"__awm_op_error__": [obj.kind, obj.message]}
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return {"__awm_bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
        if isinstance(obj, Path):
            return str(obj)
        raise TypeError(f"cannot send {type(obj).__name__} over the host pipe")

    data = json.dumps(value, default=default, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return len(data).to_bytes(8, "big") + data


def _decode_hook(obj: dict) -> Any:
    if len(obj) == 1:
        try:
            if "__awm_tool_result__" in obj:
                return ToolResult(**obj["__awm_tool_result__"])
            if "__awm_op_error__" in obj:
                kind, message = obj["__awm_op_error__"]
                return OpError(str(kind), str(message))
            if "__awm_bytes__" in obj:
                return base64.b64decode(obj["__awm_bytes__"])
        except (TypeError, ValueError):
            return obj
    return obj


def _read_message(stream) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the host worker closed its pipe")
    size = int.from_bytes(head, "big")
    if size > _MAX_MESSAGE_BYTES:
        raise EOFError(f"the host worker sent a {size}-byte message (limit {_MAX_MESSAGE_BYTES})")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the host worker closed its pipe mid-message")
    return json.loads(data, object_hook=_decode_hook)


class _IsolatedWorker:
    """The actor's side of its bubblewrap'd host worker: spawn, forward batches, write snapshot files."""

    def __init__(self, store_root: str, options: dict[str, Any]):
        from awm_rl.limits import untrusted_env
        from awm_rl.runtime.sandbox import sandboxed_command

        scenarios = Path(store_root).resolve() / "scenarios"
        scenarios.mkdir(parents=True, exist_ok=True)
        argv, env = sandboxed_command(
            [sys.executable, "-m", "awm_rl.runtime.actor", str(Path(store_root).resolve()), json.dumps(options)],
            readable=[scenarios],  # the store's scenarios only, read-only (new ones appear as they are written)
            env=untrusted_env(PYTHONDONTWRITEBYTECODE="1", HOME="/tmp", TMPDIR="/tmp"), cwd=Path("/tmp"))
        self.proc = self._spawn(argv, env)
        self._lock = threading.Lock()
        self._pipe_ms: list[float] = []
        try:
            ready = _read_message(self.proc.stdout)
        except EOFError as exc:
            self.proc.kill()
            raise RuntimeError(f"the isolated host worker did not start ({exc}; exit status {self.proc.wait()})") from None
        self.pid = self.proc.pid
        self.ready = ready

    @staticmethod
    def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        from awm_rl.runtime.sandbox import spawn  # from a thread that lives as long as this process

        try:
            return spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            raise RuntimeError(f"cannot start the isolated host worker: {exc}") from None

    def request(self, method: str, ops: list | None = None) -> Any:
        with self._lock:
            try:
                self.proc.stdin.write(_encode({"m": method, "ops": ops}))
                self.proc.stdin.flush()
                return _read_message(self.proc.stdout)
            except (EOFError, OSError, ValueError) as exc:
                self._died(exc)

    def _died(self, exc: BaseException) -> None:
        """The worker is gone (its watchdog ended it, or generated code killed it): so is this actor,
        and Ray restarts both; callers see "host crashed or restarted" Environment Errors."""
        try:
            self.proc.kill()
        except OSError:
            pass
        code = self.proc.wait()
        message = f"awm host: the isolated worker ended ({exc}; exit status {code}); ending this host actor"
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        if _in_ray_actor():
            os._exit(1)
        raise RuntimeError(message)

    def run(self, ops: list[tuple], *, timed: bool) -> list[Any]:
        sent = [("snapshot_bytes", op[1]) if op and op[0] == "snapshot" else op for op in ops]
        t0 = time.perf_counter()
        results = self.request("run_batch_timed" if timed else "run_batch", sent)
        if not isinstance(results, list) or len(results) != len(ops):
            self._died(ValueError("the host worker answered a batch with the wrong number of results"))
        out = []
        inside = 0.0
        for op, res in zip(ops, results):
            if timed:
                res, wall, cpu = res
                inside += float(wall)
            if op and op[0] == "snapshot" and not isinstance(res, OpError):
                res = self._write_snapshot(res, Path(op[2]))
            out.append((res, wall, cpu) if timed else res)
        if timed:
            self._pipe_ms.append(max(0.0, (time.perf_counter() - t0) * 1000 - inside))
            del self._pipe_ms[:-1000]
        return out

    @staticmethod
    def _write_snapshot(res: Any, out_dir: Path) -> Any:
        from awm_rl.runtime.db import write_db_file

        try:
            initial_name, initial, final_name, final = res
            if not (isinstance(initial, bytes) and isinstance(final, bytes)
                    and _SNAPSHOT_NAME.match(initial_name) and _SNAPSHOT_NAME.match(final_name)):
                raise ValueError("malformed snapshot from the host worker")
        except (TypeError, ValueError) as exc:
            return OpError("internal", str(exc))
        initial_path = out_dir / initial_name
        if not initial_path.is_file():
            write_db_file(initial, initial_path)
        final_path = write_db_file(final, out_dir / final_name)
        return str(initial_path), str(final_path)

    def pipe_ms_p50(self) -> float | None:
        values = sorted(self._pipe_ms)
        return round(values[len(values) // 2], 4) if values else None


def _in_ray_actor() -> bool:
    if "ray" not in sys.modules:
        return False
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001
        return False


def _serve_worker(store_root: str, options: dict[str, Any]) -> int:
    """The isolated worker: an in-process `EnvHost`, one JSON batch in, one JSON answer out."""
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # what generated code prints goes to the log, never into the protocol
    host = EnvHost(store_root, isolate=False, **options)
    protocol_out.write(_encode({"ready": True, "pid": os.getpid()}))
    protocol_out.flush()
    while True:
        try:
            request = _read_message(protocol_in)
        except EOFError:
            return 0
        method, ops = request.get("m"), request.get("ops") or []
        if method == "run_batch":
            answer: Any = host.run_batch(ops)
        elif method == "run_batch_timed":
            answer = host.run_batch_timed(ops)
        elif method == "stats":
            answer = host.stats()
        elif method == "info":
            answer = host.info()
        else:
            answer = {"error": f"unknown method {method!r}"}
        protocol_out.write(_encode(answer))
        protocol_out.flush()


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


if __name__ == "__main__":
    sys.exit(_serve_worker(sys.argv[1], json.loads(sys.argv[2])))
