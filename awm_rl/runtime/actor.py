"""The Ray actor that hosts environment instances: an `EnvHost` behind one batched entry point.

Every request from the client pool arrives as a batch of operations (`run_batch`), so one Ray round
trip carries many tool calls; each operation answers on its own (an error in one never fails the
batch). The actor is declared with unlimited restarts: when its host ends (a handler that cannot be
stopped, a crash), Ray starts a fresh incarnation and the instances it held answer "not hosted here"
as Environment Errors.

Where bubblewrap is available (`awm_rl.isolation.sandbox`), the actor is an `IsolatedHost` and generated
code never runs in it: the actor starts one isolated worker process per scenario (`python -m awm_rl.runtime.worker`, in
bubblewrap: no network, read-only system and only that scenario's folder, its own PID namespace, a
clean environment, uid nobody) that imports the scenario and serves its instances; the actor forwards
each batch over the workers' pipes (`awm_rl.runtime.protocol`'s codec, never pickle: the worker is untrusted)
and writes snapshot files itself from the database images a worker returns. One scenario per worker:
code of one scenario cannot reach another scenario's instances (another process, another sandbox), and
a worker that ends (its watchdog, a crash, generated code killing itself) loses only its own scenario's
instances; the actor stays up and starts a fresh worker on the next create.

Imports: a worker imports its scenario before it says it is ready; the actor waits for that under the
import limit plus a startup allowance (`import_timeout_s + STARTUP_ALLOWANCE_S`), and no other
caller's deadline applies to it (the actor runs batches for different scenarios concurrently, so a
slow import holds up nothing but creates of the same scenario). A worker that dies before it is
ready is an import crash: callers hear "import failed: <cause>" (exit status or signal and the tail of
the worker's stderr), and after `IMPORT_CRASH_LIMIT` crashes the scenario is quarantined (every
later create answers the same error, naming the cause, without starting a worker). A clean import
error (an exception, `sys.exit`, a deadline) is remembered at once, as before. The actor also keeps
a deadline per request to a worker (its calls' deadlines plus `REQUEST_GRACE_S`): a worker that
stops answering (stopped, stuck past its own watchdog) is killed, its scenario alone.

Without bubblewrap the actor is an `InProcessHost`: the scenarios run in the actor process (`MultiHost`)
under the Python-level limits only (address-space cap, resident-set watchdog, network refused while generated code runs),
as `isolation` says; the actor then runs one batch at a time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import sqlite3
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from awm_rl.isolation.limits import (
    Watchdog,
    apply_memory_limit,
    drop_secrets,
    install_guard,
    io_limits,
    rss_bytes,
    untrusted_env,
)
from awm_rl.isolation.process import WorkerProcess
from awm_rl.isolation.sandbox import (
    isolation_level,
    sandbox_available,
    sandboxed_command,
    scratch_files,
    scratch_files_limit,
    scratch_summary,
    seccomp_level,
)
from awm_rl.runtime import host as host_mod
from awm_rl.runtime.asgi import asgi_request
from awm_rl.runtime.db import InstanceConnection, _Slot, current_slot, write_db_file
from awm_rl.runtime.envcode import EnvLoadError, install_engine_routing
from awm_rl.runtime.host import DEFAULT_OPEN_INSTANCES, MultiHost, UnknownInstanceError
from awm_rl.runtime.protocol import (
    SNAPSHOT_NAME,
    WORKER_METHODS,
    CallOp,
    OpError,
    ProtocolError,
    SnapshotBytesOp,
    SnapshotOp,
    ToolResult,
    decode_op,
    encode_message,
    environment_error,
    failed,
    read_message,
)
from awm_rl.runtime.tools import build_tool_routes

IMPORT_CRASH_LIMIT = 3  # worker deaths before ready, after which a scenario is quarantined
STARTUP_ALLOWANCE_S = 20.0  # interpreter start plus FastAPI/SQLAlchemy imports on a busy machine
REQUEST_GRACE_S = 15.0  # beyond a request's call deadlines (the worker's watchdog grace, cancellation)


def _decode(ops: list) -> list[Any]:
    """Typed operations, or an `OpError` in place of each malformed one."""
    out: list[Any] = []
    for op in ops:
        try:
            out.append(decode_op(op))
        except ProtocolError as exc:
            out.append(OpError("internal", str(exc)))
    return out


class EnvHost:
    """What a host actor answers (the same for both kinds of host; `host_class` picks one).

    `run_batch(ops)` runs operations (`awm_rl.runtime.protocol`, typed or in their wire form) and answers
    each on its own, in order per instance; `run_batch_timed` adds each one's time inside the host."""

    isolation: str
    incarnation: str

    def run_batch(self, ops: list) -> list[Any]:
        raise NotImplementedError

    def run_batch_timed(self, ops: list) -> list[tuple[Any, float, float]]:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def worker_alive(self, scenario: str) -> bool:
        """Whether `scenario` has a live worker (an in-process host always answers True)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def call(self, iid: str, name: str, arguments: Any = None) -> ToolResult:
        return self.run_batch([CallOp(iid, name, arguments)])[0]


def host_class(isolate: bool | None = None) -> type[EnvHost]:
    """`IsolatedHost` when `isolate` (default: when bubblewrap is available), else an in-process host."""
    if isolate is None:
        return IsolatedHost if sandbox_available() else _UnsandboxedHost
    return IsolatedHost if isolate else InProcessHost


class InProcessHost(EnvHost):
    """Every scenario in this process (`MultiHost`) under the Python-level limits only; one batch at a time.
    What a scenario's isolated worker runs, and the actor body where bubblewrap is unavailable."""

    seccomp: str | None = None  # set by a scenario worker (awm_rl.runtime.worker): its filter, for stats()

    def __init__(self, store_root: str, *, call_timeout_s: float = 10.0, memory_mb: int | None = 6144,
                 rss_cap_mb: int | None = 8192, import_timeout_s: float = 60.0,
                 max_open_instances: int = DEFAULT_OPEN_INSTANCES, max_answer_bytes: int | None = None,
                 max_request_bytes: int | None = None,
                 isolation: str = "none: host runs in this process (isolate=False)"):
        import fastapi  # noqa: F401 - warm the heavy imports so a scenario's cold start is its own cost
        import sqlalchemy  # noqa: F401 - as above


        self.isolation = isolation
        limits = io_limits(max_answer_bytes, max_request_bytes)
        self.max_answer_bytes = limits["max_answer_bytes"]
        self._lock = threading.Lock()
        warnings.filterwarnings("ignore")  # generated code trips pydantic/sqlalchemy deprecations
        drop_secrets()  # the driver's API keys are not for generated code
        if memory_mb:
            apply_memory_limit(memory_mb)
        if host_mod._watchdog is None:
            host_mod._watchdog = Watchdog(rss_cap_mb=rss_cap_mb)
        install_guard()
        self.host = MultiHost(store_root, call_timeout_s=call_timeout_s, import_timeout_s=import_timeout_s,
                              max_open_instances=max_open_instances, **limits)
        self.incarnation = self.host.incarnation
        _warm_up()
        # Loaded code and scenarios are long-lived: keep them out of every cyclic-GC pass, and collect
        # young objects less often (each tool call allocates many short-lived ones).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)

    def _one(self, op: Any) -> Any:
        if isinstance(op, OpError):  # malformed on the wire
            return op
        try:
            return op.apply(self.host)
        except EnvLoadError as exc:
            return OpError("load", str(exc))
        except UnknownInstanceError as exc:
            return OpError("unknown", str(exc.args[0]))
        except Exception as exc:  # noqa: BLE001 - reported per operation
            if isinstance(op, CallOp):
                return environment_error(f"environment error: {type(exc).__name__}: {exc}", status=500)
            return OpError("internal", f"{type(exc).__name__}: {exc}")

    def run_batch(self, ops: list) -> list[Any]:
        typed = _decode(ops)
        with self._lock:
            return [self._one(op) for op in typed]

    def run_batch_timed(self, ops: list) -> list[tuple[Any, float, float]]:
        typed = _decode(ops)
        out = []
        with self._lock:
            for op in typed:
                t0, c0 = time.perf_counter(), time.process_time()
                res = self._one(op)
                out.append((res, (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000))
        return out

    def info(self) -> dict[str, Any]:
        return {"incarnation": self.host.incarnation, "pid": self.host.pid, "isolation": self.isolation}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out = {**self.host.stats(), "isolation": self.isolation}
        if self.seccomp is not None:  # a scenario worker: host_stats() says, per scenario, how it is filtered
            for entry in (out.get("scenarios") or {}).values():
                entry["seccomp"] = self.seccomp
        return out

    def worker_alive(self, scenario: str) -> bool:  # noqa: ARG002 - the interface's argument; always in process
        return True

    def close(self) -> None:
        self.host.close()


class _UnsandboxedHost(InProcessHost):
    """The actor body where bubblewrap is unavailable (its `isolation` says why)."""

    def __init__(self, store_root: str, **options: Any):
        super().__init__(store_root, isolation=isolation_level(), **options)


class IsolatedHost(EnvHost):
    """Each scenario in its own worker process (`python -m awm_rl.runtime.worker`, in bubblewrap where
    available) behind a pipe; batches for different scenarios run concurrently (see the module docstring)."""

    def __init__(self, store_root: str, *, call_timeout_s: float = 10.0, memory_mb: int | None = 6144,
                 rss_cap_mb: int | None = 8192, import_timeout_s: float = 60.0,
                 max_open_instances: int = DEFAULT_OPEN_INSTANCES, max_answer_bytes: int | None = None,
                 max_request_bytes: int | None = None):

        limits = io_limits(max_answer_bytes, max_request_bytes)
        self.max_answer_bytes = limits["max_answer_bytes"]
        drop_secrets()
        self.isolation = isolation_level()
        self.incarnation = os.urandom(6).hex()
        self.store_root = str(Path(store_root).resolve())
        self.call_timeout_s = call_timeout_s
        self.import_timeout_s = import_timeout_s
        # handed to each worker's InProcessHost
        self._options = dict(call_timeout_s=call_timeout_s, memory_mb=memory_mb, rss_cap_mb=rss_cap_mb,
                             import_timeout_s=import_timeout_s, max_open_instances=max_open_instances, **limits)
        self._workers: dict[str, _ScenarioWorker] = {}
        self._start_locks: dict[str, threading.Lock] = {}
        self._import_crashes: dict[str, list[str]] = {}
        self._quarantined: dict[str, str] = {}
        self._load_errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pipe_ms: list[float] = []
        (Path(self.store_root) / "scenarios").mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._monitor, name="awm-worker-deadlines", daemon=True).start()

    # -- isolated workers ----------------------------------------------------------------------
    def _monitor(self) -> None:
        """Kill a worker that does not answer a request within its deadline, or keeps more files in its
        scratch tmpfs than allowed (`sandbox.scratch_files`); that scenario only."""

        limit = scratch_files_limit()
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            for worker in list(self._workers.values()) + [w for w in list(_STARTING) if w.owner is self]:
                until = worker.busy_until
                if until is not None and now > until:
                    worker.kill(f"it did not answer within its deadline ({worker.busy_budget:.0f}s)")
                files = scratch_files(worker.pid) if worker.alive else None
                if files is not None and files > limit:
                    worker.kill(f"it kept {files:,} files in its scratch space, over the limit of {limit:,} "
                                "(AWM_SCRATCH_FILES)")

    def _worker_for(self, scenario: str, *, start: bool) -> tuple["_ScenarioWorker | None", str | None]:
        """The live worker of `scenario` (started when `start`), or (None, why not)."""
        with self._lock:
            found = self._known(scenario)
            if found is not None:
                return found
            if not start:
                return None, None  # no worker: the caller says its instances are lost
            lock = self._start_locks.setdefault(scenario, threading.Lock())
        with lock:  # one import of a scenario at a time; other scenarios go on meanwhile
            with self._lock:
                found = self._known(scenario)
                if found is not None:
                    return found
            folder = Path(self.store_root) / "scenarios" / scenario
            if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,200}", scenario) or scenario.startswith(".") or not folder.is_dir():
                return None, f"unknown scenario {scenario!r}: no folder {folder}"
            worker = _ScenarioWorker(self, scenario, folder)
            try:
                ready = worker.start(self.import_timeout_s + STARTUP_ALLOWANCE_S)
            except _ImportCrash as crash:
                with self._lock:
                    crashes = self._import_crashes.setdefault(scenario, [])
                    crashes.append(crash.cause)
                    message = f"import failed: {crash.cause}"
                    if len(crashes) >= IMPORT_CRASH_LIMIT:
                        message += (f" (the import crashed {len(crashes)} times; {scenario!r} is quarantined on "
                                    "this host)")
                        self._quarantined[scenario] = message
                return None, message
            if "load_error" in ready:
                message = str(ready["load_error"])
                with self._lock:
                    self._load_errors[scenario] = message
                worker.kill("its import failed")
                return None, message
            with self._lock:
                self._workers[scenario] = worker
            return worker, None

    def _known(self, scenario: str) -> tuple["_ScenarioWorker | None", str | None] | None:
        if scenario in self._quarantined:
            return None, self._quarantined[scenario]
        if scenario in self._load_errors:
            return None, self._load_errors[scenario]
        worker = self._workers.get(scenario)
        if worker is not None and worker.alive:
            return worker, None
        if worker is not None:
            del self._workers[scenario]
        return None

    def _budget(self, ops: list) -> float:
        calls = sum(1 for op in ops if isinstance(op, CallOp))
        return self.call_timeout_s * max(1, calls) + REQUEST_GRACE_S

    def _run_isolated(self, ops: list, *, timed: bool) -> list[Any]:
        t0 = time.perf_counter()
        results: list[Any] = [None] * len(ops)
        groups: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            if isinstance(op, OpError):  # malformed on the wire
                results[i] = op
            else:
                groups.setdefault(op.scenario, []).append(i)
        workers: dict[str, _ScenarioWorker] = {}
        for scenario, idx in groups.items():
            start = any(ops[i].loads for i in idx)
            worker, why = self._worker_for(scenario, start=start)
            if worker is None:
                why = why or (f"instance of {scenario!r} is not hosted here (released, or the worker of its "
                              "scenario ended: its instances are lost)")
                for i in idx:
                    results[i] = failed(ops[i], why, "load" if start else "unknown")
            else:
                workers[scenario] = worker
        order = sorted(workers)  # locks in one order: batches of several scenarios never deadlock
        for scenario in order:
            workers[scenario].lock.acquire()
        inside = 0.0
        try:
            sent = {}
            for scenario in order:
                idx = groups[scenario]
                part = [SnapshotBytesOp(ops[i].instance_id) if isinstance(ops[i], SnapshotOp) else ops[i] for i in idx]
                sent[scenario] = workers[scenario].send("run_batch_timed" if timed else "run_batch", part,
                                                        self._budget(part))
            for scenario in order:
                worker, idx = workers[scenario], groups[scenario]
                answer = worker.receive() if sent[scenario] else None
                if not isinstance(answer, list) or len(answer) != len(idx):
                    if isinstance(answer, list):
                        worker.kill("it answered a batch with the wrong number of results")
                    why = (f"the host worker of {scenario!r} ended ({worker.cause}); its instances on this host "
                           "are lost")
                    for i in idx:
                        results[i] = (failed(ops[i], why), 0.0, 0.0) if timed else failed(ops[i], why)
                    continue
                for i, res in zip(idx, answer, strict=True):
                    if timed:
                        try:
                            res, wall, cpu = res
                            wall, cpu = float(wall), float(cpu)
                        except (TypeError, ValueError):
                            res, wall, cpu = OpError("internal", "malformed timed answer"), 0.0, 0.0
                        inside += wall
                    if isinstance(ops[i], SnapshotOp) and not isinstance(res, OpError):
                        res = _write_snapshot(res, Path(ops[i].out_dir))
                    elif isinstance(res, ToolResult):
                        res = _bounded(res, self.max_answer_bytes)
                    results[i] = (res, wall, cpu) if timed else res
        finally:
            for scenario in order:
                workers[scenario].lock.release()
        if timed:
            results = [r if isinstance(r, tuple) else (r, 0.0, 0.0) for r in results]
            self._pipe_ms.append(max(0.0, (time.perf_counter() - t0) * 1000 - inside))
            del self._pipe_ms[:-1000]
        return results

    # -- entry points ----------------------------------------------------------------------------
    def run_batch(self, ops: list) -> list[Any]:
        """Run operations; those of different scenarios run in their own workers, the order holds per scenario."""
        return self._run_isolated(_decode(ops), timed=False)

    def run_batch_timed(self, ops: list) -> list[tuple[Any, float, float]]:
        return self._run_isolated(_decode(ops), timed=True)

    def info(self) -> dict[str, Any]:
        return {"incarnation": self.incarnation, "pid": os.getpid(), "isolation": self.isolation,
                "seccomp": seccomp_level(),
                "workers": {s: w.pid for s, w in list(self._workers.items()) if w.alive}}

    def stats(self) -> dict[str, Any]:
        scenarios: dict[str, Any] = {}
        worker_pids: dict[str, int] = {}
        worker_rss = 0.0
        for scenario, worker in sorted(self._workers.items()):
            with worker.lock:
                out = worker.request("stats", REQUEST_GRACE_S) if worker.alive else None
            if isinstance(out, dict):
                scenarios.update(out.get("scenarios") or {})
                worker_rss += float(out.get("rss_mb") or 0.0)
                worker_pids[scenario] = worker.pid
        with self._lock:
            load_errors = {**self._load_errors, **self._quarantined}
            crashes = {k: len(v) for k, v in self._import_crashes.items()}
            quarantined = dict(self._quarantined)
        values = sorted(self._pipe_ms)
        # pid: this actor's (a worker's own pid is 2 in its namespace); memory: the actor and its workers.
        return {"pid": os.getpid(), "incarnation": self.incarnation, "isolation": self.isolation,
                "seccomp": seccomp_level(), "scratch": scratch_summary("host"), "scenarios": scenarios, "load_errors": load_errors,
                "import_crashes": crashes, "quarantined": quarantined, "workers": worker_pids, "worker_rss_mb": worker_rss,
                "rss_mb": worker_rss + rss_bytes() / 2**20,
                "pipe_ms_p50": round(values[len(values) // 2], 4) if values else None}

    def worker_alive(self, scenario: str) -> bool:
        with self._lock:
            worker = self._workers.get(scenario)
            return worker is not None and worker.alive

    def close(self) -> None:
        """End the isolated workers."""
        for worker in list(self._workers.values()):
            worker.kill("its host is closing")
        self._workers.clear()


# ---------------------------------------------------------------------------------------------
# the isolated scenario workers and their pipes

_STARTING: "set[_ScenarioWorker]" = set()  # workers importing (watched by their actor's deadline thread)



class _ImportCrash(Exception):
    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


class _ScenarioWorker:
    """The actor's side of one scenario's bubblewrap'd worker: spawn, wait for its import, forward batches."""

    def __init__(self, owner: IsolatedHost, scenario: str, folder: Path):
        self.owner = owner
        self.scenario = scenario
        self.lock = threading.Lock()  # one request at a time on the pipe
        self.busy_until: float | None = None
        self.busy_budget = 0.0
        self.alive = True
        self.cause = "running"
        argv, env = sandboxed_command(
            [sys.executable, "-m", "awm_rl.runtime.worker", owner.store_root, json.dumps(owner._options), scenario],
            readable=[folder],  # its own scenario's folder only, read-only
            env=untrusted_env(PYTHONDONTWRITEBYTECODE="1", HOME="/tmp", TMPDIR="/tmp"), cwd=Path("/tmp"))
        try:
            self.process = WorkerProcess(argv, env=env, log_prefix=scenario)
        except OSError as exc:
            raise _ImportCrash(f"cannot start the isolated worker of {scenario!r}: {exc}") from None
        self.pid = self.process.pid

    def start(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the worker's import; raises _ImportCrash when it ends (or is killed) before ready."""
        self.busy_budget = timeout_s
        self.busy_until = time.monotonic() + timeout_s
        _STARTING.add(self)
        try:
            ready = read_message(self.process.stdout)
            if not isinstance(ready, dict) or not ready.get("ready"):
                raise EOFError("the worker sent something other than its ready message")
            return ready
        except (EOFError, OSError, ValueError) as exc:
            self._ended(exc)
            raise _ImportCrash(f"{self.cause}, while importing {self.scenario!r}") from None
        finally:
            _STARTING.discard(self)
            self.busy_until = None

    def send(self, method: str, ops: list | None, budget_s: float) -> bool:
        """Write one request (a `WORKER_METHODS` name; the caller holds `lock`); False when the worker is gone."""
        if method not in WORKER_METHODS:
            raise ProtocolError(f"{method!r} is not a scenario worker's method (known: {', '.join(WORKER_METHODS)})")
        if not self.alive:
            return False
        self.busy_budget = budget_s
        self.busy_until = time.monotonic() + budget_s
        try:
            wire = [op.wire() for op in ops] if ops is not None else None
            self.process.stdin.write(encode_message({"m": method, "ops": wire}))
            self.process.stdin.flush()
            return True
        except (OSError, ValueError) as exc:
            self._ended(exc)
            return False

    def receive(self) -> Any:
        """Read one answer (the caller holds `lock`); None when the worker ended instead."""
        try:
            return read_message(self.process.stdout)
        except (EOFError, OSError, ValueError) as exc:
            self._ended(exc)
            return None
        finally:
            self.busy_until = None

    def request(self, method: str, budget_s: float) -> Any:
        return self.receive() if self.send(method, None, budget_s) else None

    def kill(self, why: str) -> None:
        self.process.kill(why)

    def _ended(self, exc: BaseException) -> None:
        self.alive = False
        self.busy_until = None
        self.process.kill()  # its pipe broke: make sure it is gone
        death = self.process.death()
        cause = f"the worker was {death.cause()}" if death.killed_why or death.signal is not None \
            else f"the worker {death.cause()}"
        if death.stderr():
            cause += "; its stderr ended with: " + death.stderr()
        self.cause = cause
        sys.stderr.write(f"awm host: the isolated worker of {self.scenario!r} ended ({exc}): {cause}\n")
        sys.stderr.flush()


def _bounded(res: ToolResult, limit: int) -> ToolResult:
    """A worker's answer within the answer limit, or an environment error naming it: the worker enforces
    the limit at the source, this is the same check where the worker (running generated code) is not trusted."""
    size = len(res.text.encode("utf-8", errors="replace")) if len(res.text) * 4 > limit else len(res.text)
    if size <= limit:
        return res
    return environment_error(f"environment error: the tool's answer is {size:,} bytes, over the limit of "
                             f"{limit:,} bytes (AWM_MAX_ANSWER_BYTES); it was not sent", status=502)


def _write_snapshot(res: Any, out_dir: Path) -> Any:

    try:
        initial_name, initial, final_name, final = res
        if not (isinstance(initial, bytes) and isinstance(final, bytes)
                and SNAPSHOT_NAME.match(initial_name) and SNAPSHOT_NAME.match(final_name)):
            raise ValueError("malformed snapshot from the host worker")
    except (TypeError, ValueError) as exc:
        return OpError("internal", str(exc))
    initial_path = out_dir / initial_name
    if not initial_path.is_file():
        write_db_file(initial, initial_path)
    final_path = write_db_file(final, out_dir / final_name)
    return str(initial_path), str(final_path)


class _WarmItem(BaseModel):
    a: int = 1


def _warm_up() -> None:
    """Exercise FastAPI/pydantic code paths once, so the first scenario's cold start is not inflated."""
    from fastapi import FastAPI


    app = FastAPI()

    @app.post("/x/{i}", operation_id="x")
    async def x(i: int, item: _WarmItem) -> _WarmItem:  # noqa: ARG001 - the route's shape is what is warmed
        return item

    build_tool_routes(app)
    asyncio.run(asgi_request(app, "POST", "/x/1", b"", b'{"a": 2}'))

    # The ORM path a generated handler takes: routed engine, mapper configuration, a query.
    import sqlalchemy
    from sqlalchemy import Column, Integer
    from sqlalchemy.orm import declarative_base, sessionmaker


    install_engine_routing()
    base = declarative_base()

    class Row(base):  # type: ignore[valid-type,misc]  # declarative_base() makes the class at run time
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
    """The Ray actor class: an `IsolatedHost` where bubblewrap is available, else an in-process one (built
    lazily so importing this module does not import Ray)."""
    import ray

    cls = host_class()
    # Isolated: batches for different scenarios run concurrently (each worker has its own pipe and
    # lock); in-process hosts run one batch at a time on the main thread (their SIGALRM deadlines).
    opts = {"max_restarts": -1, "max_task_retries": 0, "num_cpus": 0,
            "max_concurrency": 32 if cls is IsolatedHost else 1}
    opts.update(options)
    return ray.remote(**opts)(cls)

