"""A host: generated environment code loaded once per worker process, serving many isolated instances.

`ScenarioHost` holds one scenario (its imported FastAPI app, its tools, its template database) and
any number of instances, each with a private in-memory SQLite copy (see `db.py`). A tool call
binds the instance's database to the current context, sends one in-process ASGI request to the app
(FastAPI validation and error texts exactly as over HTTP) and returns a `ToolResult`.

Memory: an instance's open connection costs its database plus SQLite's parsed schema, page cache and
prepared statements (2-5x the database itself). So a host keeps at most `max_open_instances` connections
open per scenario (least recently used first out); an idle instance beyond that is *parked*: only the
pages where its database differs from the template are kept (`db.PageDelta`: a few KB after an episode's
writes; nothing at all while it still equals the initial database) and it is reopened on its next call
(~0.3 ms). Only instances between calls, with no open transaction, are parked.

`MultiHost` holds several scenarios in one process (what a Ray host actor wraps). Both run every
piece of generated code under the process's limits (`awm_rl.isolation.limits`): network refused, a deadline
per call (soft: `CallTimeout` raised in the handler; hard: the watchdog exits the process), and a
memory cap applied by whoever starts the process. What crosses a call is bounded too (`awm_resources.settings`):
arguments above `AWM_MAX_REQUEST_BYTES` are refused (an agent error, 413) and an answer above
`AWM_MAX_ANSWER_BYTES` is dropped as the app streams it out (an environment error, 502, naming both sizes),
so no oversized answer leaves the worker, whoever called (pool, `awm serve`, env check, quality probe).

Error kinds in `ToolResult.error_kind`: "agent" (the caller's mistake: unknown tool, arguments that
are not a JSON object, an argument the tool does not take, HTTP 4xx such as FastAPI's 422) and
"environment" (the environment failed: HTTP 5xx, a timeout, a crashed or restarted host, an instance
lost or recycled).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import logging
import os
import signal
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from awm_rl.isolation.limits import CallTimeout, Watchdog, deadline, io_limits, untrusted
from awm_rl.runtime.asgi import AnswerTooLarge, asgi_request
from awm_rl.runtime.db import PageDelta, _Slot, build_template, current_slot, open_instance_db, write_db_file
from awm_rl.runtime.envcode import EnvLoadError, LoadedEnv, load_env
from awm_rl.runtime.protocol import ToolResult, agent_error, environment_error, instance_id, snapshot_stem
from awm_rl.runtime.tools import (
    ArgumentError,
    ToolRoute,
    build_tool_routes,
    check_argument_names,
    parse_arguments,
    to_request,
)

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_S = 10.0
DEFAULT_IMPORT_TIMEOUT_S = 60.0
DEFAULT_OPEN_INSTANCES = 256  # open connections per scenario before idle instances are parked


def _generated_frames(error: BaseException, limit: int = 3) -> str:
    """Where in the generated server.py an exception came from (the last frames), for error summaries."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith("server.py")][-limit:]
    return "; ".join(f"server.py line {f.lineno} in {f.name}: {(f.line or '').strip()[:160]}" for f in frames)


def _result_from_http(status: int, body: bytes, error: BaseException | None = None) -> ToolResult:
    if isinstance(error, AnswerTooLarge):  # an environment failure: the agent never receives the body
        return environment_error(f"environment error: {error}", status=502)
    text = body.decode("utf-8", errors="replace")
    if status < 400:
        return ToolResult(ok=True, status=status, text=text)
    detail = None
    if error is not None:
        where = _generated_frames(error)
        detail = f"{type(error).__name__}: {str(error)[:500]}" + (f" (at {where})" if where else "")
    return ToolResult(ok=False, status=status, text=text, error_kind="agent" if status < 500 else "environment",
                      detail=detail)


class UnknownInstanceError(KeyError):
    """The instance id is not hosted here (released, or the host restarted since it was created)."""


class _Instance:
    __slots__ = ("id", "slot", "broken", "calls", "lock", "image", "changes_at_open", "in_call")

    def __init__(self, instance_id: str):
        self.id = instance_id
        self.lock: asyncio.Lock | None = None  # calls from an event loop (awm serve) take it one at a time
        self.slot = _Slot()
        self.broken: str | None = None  # set when a call had to be abandoned; cleared by reset()
        self.calls = 0
        self.image: PageDelta | None = None  # the database while parked (None: the initial database)
        self.changes_at_open = 0  # the connection's total_changes when it was opened or reset
        self.in_call = 0  # calls running on the instance (never parked meanwhile)


_watchdog: Watchdog | None = None


@contextlib.contextmanager
def _interrupt_generated(filename: str, seconds: float):
    """From `seconds` on, every 50 ms: raise `CallTimeout` in the main thread if a frame of the generated
    code (`filename`) is on the stack; otherwise (the event loop waiting, our own code) do nothing.
    For handlers that block the event loop, where `asyncio.wait_for` cannot fire. No-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        f = frame
        while f is not None:
            if f.f_code.co_filename == filename:
                signal.setitimer(signal.ITIMER_REAL, 0)
                raise CallTimeout(f"the handler did not return within {seconds:g}s")
            f = f.f_back

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _ThreadCalls:
    """How many functions FastAPI/Starlette are running in worker threads right now (sync handlers and
    dependencies go through `anyio.to_thread.run_sync`). After a timeout, a non-zero count means
    generated code is still running in a thread that nothing can stop."""

    def __init__(self) -> None:
        self.busy = 0
        self.lock = threading.Lock()

    def install(self) -> None:
        import anyio.to_thread

        if getattr(anyio.to_thread.run_sync, "_awm_tracked", False):
            return
        original = anyio.to_thread.run_sync

        async def run_sync(func, *args, **kwargs):
            def tracked(*a):
                with self.lock:
                    self.busy += 1
                try:
                    return func(*a)
                finally:
                    with self.lock:
                        self.busy -= 1
            return await original(tracked, *args, **kwargs)

        run_sync._awm_tracked = True  # type: ignore[attr-defined]  # a marker on the function: patched once
        anyio.to_thread.run_sync = run_sync


thread_calls = _ThreadCalls()


def _new_loop() -> asyncio.AbstractEventLoop:
    """A plain selector loop, whatever the process's policy: Ray workers install uvloop, which swallows
    exceptions raised by signal handlers, so the SIGALRM deadline could not interrupt a waiting call."""
    return asyncio.SelectorEventLoop()


def process_watchdog(rss_cap_mb: int | None = None) -> Watchdog:
    """The one watchdog thread of this process (created on first use)."""
    global _watchdog
    if _watchdog is None:
        _watchdog = Watchdog(rss_cap_mb=rss_cap_mb)
    return _watchdog


class ScenarioHost:
    """One scenario's env code, imported once, serving many instances (see module docstring)."""

    def __init__(self, scenario: str, code: str, initial_db: Path, *, source_path: str | None = None,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, import_timeout_s: float = DEFAULT_IMPORT_TIMEOUT_S,
                 max_open_instances: int = DEFAULT_OPEN_INSTANCES, max_answer_bytes: int | None = None,
                 max_request_bytes: int | None = None):
        t0 = time.perf_counter()
        c0 = time.process_time()
        self.scenario = scenario
        self.call_timeout_s = call_timeout_s
        # what may leave (an answer) and come in (the arguments), the isolation settings unless given
        limits = io_limits(max_answer_bytes, max_request_bytes)
        self.max_answer_bytes = limits["max_answer_bytes"]
        self.max_request_bytes = limits["max_request_bytes"]
        self.max_open_instances = max(1, max_open_instances)
        self._open: OrderedDict[str, _Instance] = OrderedDict()  # instances with a connection, oldest use first
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]
        self.instances: dict[str, _Instance] = {}
        self._loop = _new_loop()
        self._watchdog = process_watchdog()
        thread_calls.install()
        module_name = f"awm_env_{scenario}_{self._prefix}"
        self._filename = source_path or f"<env {scenario}>/server.py"
        base_template = build_template(Path(initial_db))
        self.env: LoadedEnv = load_env(code, base_template, module_name=module_name,
                                       filename=self._filename,
                                       timeout_s=import_timeout_s)
        self.template = self.env.template
        try:
            self.tools: dict[str, ToolRoute] = build_tool_routes(self.env.app)
        except Exception as exc:  # noqa: BLE001 - a broken app schema is a load error of this env
            raise EnvLoadError(f"could not list the tools of {scenario!r}: {type(exc).__name__}: {exc}") from None
        self._specs = [t.spec() for t in self.tools.values()]
        self._initial_file: Path | None = None
        self._run_lifespan_startup()
        self.cold_start_ms = (time.perf_counter() - t0) * 1000
        self.cold_start_cpu_ms = (time.process_time() - c0) * 1000  # the same, without waiting for the CPU

    @classmethod
    def from_dir(cls, scenario: str, scenario_dir: Path, **kw: Any) -> "ScenarioHost":
        """Load from an artifact-store scenario folder (`server.py`, `initial.db`)."""
        scenario_dir = Path(scenario_dir)
        server = scenario_dir / "server.py"
        if not server.is_file():
            raise EnvLoadError(f"scenario {scenario!r} has no environment code ({server} is missing)")
        if not (scenario_dir / "initial.db").is_file():
            raise EnvLoadError(f"scenario {scenario!r} has no initial database ({scenario_dir / 'initial.db'} is missing)")
        return cls(scenario, server.read_text(encoding="utf-8"), scenario_dir / "initial.db",
                   source_path=str(server), **kw)

    # -- lifecycle ---------------------------------------------------------------------------
    def _run_lifespan_startup(self) -> None:
        """Run the app's startup hooks once against the template (rare in generated code, but the
        server would run them before its first request)."""
        handlers = list(getattr(self.env.app.router, "on_startup", None) or [])
        if not handlers:
            return

        async def startup() -> None:
            for handler in handlers:
                result = handler()
                if asyncio.iscoroutine(result):
                    await result

        slot = _Slot()
        slot.conn = open_instance_db(self.template)
        token = current_slot.set(slot)
        try:
            with untrusted(), deadline(self.call_timeout_s), self._watchdog.watch(f"{self.scenario} startup", self.call_timeout_s):
                self._loop.run_until_complete(startup())
            self.template = slot.conn.serialize()
        except BaseException as exc:  # noqa: BLE001 - anything generated startup code raises is a load error
            raise EnvLoadError(f"startup hooks of {self.scenario!r} failed: {type(exc).__name__}: {exc}") from None
        finally:
            current_slot.reset(token)
            slot.conn.really_close()

    def close(self) -> None:
        for inst in list(self.instances.values()):
            self._close_instance(inst)
        self.instances.clear()
        try:
            self._loop.close()
        except Exception:  # noqa: BLE001 - closing: a loop that will not close is dropped anyway
            pass

    # -- instances ---------------------------------------------------------------------------
    def create_instance(self) -> str:
        """A new isolated instance (its database is copied lazily, on first use)."""
        iid = instance_id(self.scenario, self._prefix, next(self._ids))
        self.instances[iid] = _Instance(iid)
        return iid

    def _get(self, iid: str) -> _Instance:
        inst = self.instances.get(iid)
        if inst is None:
            raise UnknownInstanceError(f"instance {iid!r} is not hosted here (released, or its host restarted)")
        return inst

    def _close_instance(self, inst: _Instance) -> None:
        """Close the connection and forget the database (the instance starts from the template again)."""
        inst.image = None
        self._drop_connection(inst)

    def _drop_connection(self, inst: _Instance) -> None:
        self._open.pop(inst.id, None)
        if inst.slot.conn is not None:
            inst.slot.conn.really_close()
            inst.slot.conn = None
            inst.slot.record = None

    def _conn(self, inst: _Instance):
        conn = inst.slot.conn
        if conn is None:
            conn = inst.slot.conn = open_instance_db(inst.image.apply(self.template) if inst.image is not None
                                                     else self.template)
            inst.changes_at_open = conn.total_changes
            self._open[inst.id] = inst
            if len(self._open) > self.max_open_instances:
                self._park_idle(keep=inst)
        else:
            self._open.move_to_end(inst.id)
        return conn

    def _park_idle(self, keep: _Instance) -> None:
        """Park the least recently used instances until at most `max_open_instances` are open."""
        for _ in range(len(self._open)):
            if len(self._open) <= self.max_open_instances:
                return
            iid, inst = next(iter(self._open.items()))
            conn = inst.slot.conn
            if inst is keep or inst.in_call or conn is None or conn.in_transaction:
                self._open.move_to_end(iid)
                continue
            if conn.total_changes != inst.changes_at_open:
                inst.image = PageDelta(self.template, conn.serialize())
            self._drop_connection(inst)

    def _image(self, inst: _Instance) -> bytes:
        """The instance's database as it is now."""
        if inst.slot.conn is not None:
            return inst.slot.conn.serialize()
        return inst.image.apply(self.template) if inst.image is not None else self.template

    def reset(self, iid: str) -> None:
        """Restore the initial database (an in-place copy of the template, ~0.1 ms)."""
        inst = self._get(iid)
        inst.image = None
        if inst.slot.conn is not None:
            try:
                inst.slot.conn.deserialize(self.template)
                inst.changes_at_open = inst.slot.conn.total_changes
            except Exception:  # noqa: BLE001 - e.g. a statement left open: start from a fresh connection
                self._close_instance(inst)
        inst.broken = None

    def release(self, iid: str) -> None:
        inst = self.instances.pop(iid, None)
        if inst is not None:
            self._close_instance(inst)

    def connection(self, iid: str):
        """The instance's live sqlite3 connection (trusted callers only: tests, benchmark checks)."""
        return self._conn(self._get(iid))

    def snapshot(self, iid: str, out_dir: Path) -> tuple[Path, Path]:
        """(initial, final) read-only database files for verification."""
        inst = self._get(iid)
        out_dir = Path(out_dir)
        initial = out_dir / f"{self.scenario}.{self._prefix}.initial.db"
        if self._initial_file != initial or not initial.is_file():
            write_db_file(self.template, initial)
            self._initial_file = initial
        final = out_dir / f"{snapshot_stem(iid)}.final.db"
        write_db_file(self._image(inst), final)
        return initial, final

    def snapshot_bytes(self, iid: str) -> tuple[str, bytes, str, bytes]:
        """(initial file name, its image, final file name, its image): `snapshot` for a worker that cannot
        write the caller's folder (an isolated host worker; its actor writes the files)."""
        inst = self._get(iid)
        final = self._image(inst)
        return (f"{self.scenario}.{self._prefix}.initial.db", self.template,
                f"{snapshot_stem(iid)}.final.db", final)

    # -- tools -------------------------------------------------------------------------------
    def list_tools(self) -> list[dict[str, Any]]:
        return self._specs

    def _prepare(self, inst: _Instance, name: str, arguments: Any):
        if inst.broken:
            return environment_error(inst.broken)
        tool = self.tools.get(name)
        if tool is None:
            return agent_error(404, f"Unknown tool {name!r} in environment {self.scenario!r}. "
                                    f"Available tools: {', '.join(self.tools)}")
        try:
            args = parse_arguments(arguments)
        except ArgumentError as exc:
            return agent_error(400, f"Invalid arguments for tool {name!r}: {exc}")
        try:
            check_argument_names(tool, args)
        except ArgumentError as exc:  # a name the tool does not take would be dropped silently: say so
            return agent_error(422, str(exc))
        req = to_request(tool, args)
        if req.missing_path:
            detail = [{"type": "missing", "loc": ["path", p], "msg": "Field required", "input": None}
                      for p in req.missing_path]
            return agent_error(422, json.dumps({"detail": detail}))
        return req

    def _sized(self, name: str, req: Any) -> Any:
        """The prepared request, or an agent error (413) when its arguments pass `max_request_bytes`."""
        if isinstance(req, ToolResult):
            return req
        size = len(req.body or b"") + len(req.query or b"") + len(req.path)
        if size > self.max_request_bytes:
            return agent_error(413, f"The arguments of tool {name!r} are {size:,} bytes, over the limit of "
                                    f"{self.max_request_bytes:,} bytes (AWM_MAX_REQUEST_BYTES).")
        return req

    def call_tool(self, iid: str, name: str, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """Run one tool call synchronously (main thread of a worker: soft deadline via SIGALRM)."""
        t0 = time.perf_counter()
        try:
            inst = self._get(iid)
        except UnknownInstanceError as exc:
            return environment_error(str(exc.args[0]))
        req = self._sized(name, self._prepare(inst, name, arguments))
        if isinstance(req, ToolResult):
            req.elapsed_ms = (time.perf_counter() - t0) * 1000
            return req
        self._conn(inst)
        inst.calls += 1
        inst.in_call += 1
        token = current_slot.set(inst.slot)
        loop = self._loop
        task = None
        try:
            with untrusted():
                task = loop.create_task(asgi_request(self.env.app, req.method, req.path, req.query, req.body,
                                                     max_body=self.max_answer_bytes))
                with self._watchdog.watch(f"tool {name!r} of {self.scenario!r}", self.call_timeout_s), \
                        deadline(self.call_timeout_s):
                    status, body, err = loop.run_until_complete(task)
            result = _result_from_http(status, body, err)
        except CallTimeout:
            self._abandon(task)
            result = self._recycle(inst, f"tool {name!r} did not return within {self.call_timeout_s:g}s")
        finally:
            current_slot.reset(token)
            self._end_call(inst)
        result.elapsed_ms = (time.perf_counter() - t0) * 1000
        return result

    async def call_tool_async(self, iid: str, name: str, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """The same call from inside a running event loop (the `awm serve` process).

        Calls to one instance run one at a time (an asyncio lock per instance, which `reset_async`
        takes too): concurrent calls never share a transaction on the instance's connection, so a
        rollback at the end of one call cannot undo another's acknowledged write, and a reset waits for
        the calls in flight. Each call has its own deadline, counted from when it starts running: an
        awaiting handler is cancelled at the deadline; a handler that spins on the event loop (a loop
        after an `await`) is interrupted there by SIGALRM, which raises `CallTimeout` only while a frame
        of the generated code is on the stack (`_interrupt_generated`); a handler stuck in C code or in
        a worker thread is left to the watchdog, which ends the process.
        """
        t0 = time.perf_counter()
        try:
            inst = self._get(iid)
        except UnknownInstanceError as exc:
            return environment_error(str(exc.args[0]))
        async with self._async_lock(inst):
            if self.instances.get(iid) is not inst:
                return environment_error(f"environment error: instance {iid!r} was released")
            return await self._call_async_locked(inst, name, arguments, t0)

    async def _call_async_locked(self, inst: _Instance, name: str, arguments: Any, t0: float) -> ToolResult:
        req = self._sized(name, self._prepare(inst, name, arguments))
        if isinstance(req, ToolResult):
            return req
        self._conn(inst)
        inst.calls += 1
        inst.in_call += 1
        token = current_slot.set(inst.slot)
        timeout = self.call_timeout_s
        try:
            with untrusted(), self._watchdog.watch(f"tool {name!r} of {self.scenario!r}", timeout), \
                    _interrupt_generated(self._filename, timeout):
                status, body, err = await asyncio.wait_for(
                    asgi_request(self.env.app, req.method, req.path, req.query, req.body,
                                 max_body=self.max_answer_bytes), timeout)
            result = _result_from_http(status, body, err)
        except (asyncio.TimeoutError, CallTimeout):
            result = self._recycle(inst, f"tool {name!r} did not return within {timeout:g}s")
            for _ in range(100):  # a sync handler keeps running in its thread after the task is cancelled
                if not thread_calls.busy:
                    break
                await asyncio.sleep(0.01)
            else:
                self._watchdog._die(f"a timed-out handler of {self.scenario!r} is still running in a worker thread")
        finally:
            current_slot.reset(token)
            self._end_call(inst)
        result.elapsed_ms = (time.perf_counter() - t0) * 1000
        return result

    @staticmethod
    def _async_lock(inst: _Instance) -> asyncio.Lock:
        if inst.lock is None:
            inst.lock = asyncio.Lock()
        return inst.lock

    async def reset_async(self, iid: str) -> None:
        """`reset` after the instance's calls in flight have finished (see `call_tool_async`)."""
        inst = self._get(iid)
        async with self._async_lock(inst):
            self.reset(iid)

    @staticmethod
    def _end_call(inst: _Instance) -> None:
        """Roll back what a handler left uncommitted (a leaked session), as the HTTP server's pool would."""
        inst.in_call -= 1
        conn = inst.slot.conn
        if conn is not None and not conn.closed and conn.in_transaction:
            conn.rollback()

    def _abandon(self, task: asyncio.Task | None) -> None:
        """After a soft timeout: make sure the handler is gone, or end the process (it cannot be stopped)."""
        old = self._loop
        if task is not None and not task.done():
            task.cancel()
            try:
                with self._watchdog.watch("cancelling a timed-out handler", 1.0), deadline(1.0):
                    old.run_until_complete(asyncio.wait([task], timeout=1.0))
            except CallTimeout:
                pass
            if not task.done():
                self._watchdog._die(f"a timed-out handler of {self.scenario!r} could not be stopped")
        # A sync handler abandoned by its task keeps running in its worker thread: wait briefly, then
        # end the process rather than keep a runaway thread (and the instance's database) alive.
        until = time.monotonic() + 1.0
        while thread_calls.busy and time.monotonic() < until:
            time.sleep(0.01)
        if thread_calls.busy:
            self._watchdog._die(f"a timed-out handler of {self.scenario!r} is still running in a worker thread")
        # The interrupt may have landed inside the loop's own bookkeeping: start from a fresh loop.
        self._loop = _new_loop()
        try:
            logging.getLogger("asyncio").disabled = True
            old.close()
        except Exception:  # noqa: BLE001 - the replaced loop is dropped either way
            pass
        finally:
            logging.getLogger("asyncio").disabled = False

    def _recycle(self, inst: _Instance, why: str) -> ToolResult:
        self._close_instance(inst)
        inst.broken = (f"environment error: {why}; the instance was recycled and its state lost. "
                       "Call reset() before using it again.")
        return environment_error(f"environment error: {why}; the instance was recycled.", status=504)


class MultiHost:
    """Several scenarios in one worker process, loaded on demand from an artifact-store root."""

    def __init__(self, store_root: Path | str, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 import_timeout_s: float = DEFAULT_IMPORT_TIMEOUT_S,
                 max_open_instances: int = DEFAULT_OPEN_INSTANCES, max_answer_bytes: int | None = None,
                 max_request_bytes: int | None = None):
        self.store_root = Path(store_root)
        self.limits = {"max_answer_bytes": max_answer_bytes, "max_request_bytes": max_request_bytes}
        self.call_timeout_s = call_timeout_s
        self.import_timeout_s = import_timeout_s
        self.max_open_instances = max_open_instances
        self.hosts: dict[str, ScenarioHost] = {}
        self.load_errors: dict[str, str] = {}
        self.owner: dict[str, ScenarioHost] = {}  # instance id -> host
        self.incarnation = uuid.uuid4().hex[:12]
        self.pid = os.getpid()

    def scenario_dir(self, scenario: str) -> Path:
        return self.store_root / "scenarios" / scenario

    def load(self, scenario: str) -> dict[str, Any]:
        """Import a scenario (idempotent); returns {"scenario", "cold_start_ms", "tools"}; raises EnvLoadError."""
        host = self.hosts.get(scenario)
        if host is None:
            if scenario in self.load_errors:
                raise EnvLoadError(self.load_errors[scenario])
            folder = self.scenario_dir(scenario)
            if not folder.is_dir():
                raise EnvLoadError(f"unknown scenario {scenario!r}: no folder {folder}")
            try:
                host = ScenarioHost.from_dir(scenario, folder, call_timeout_s=self.call_timeout_s,
                                             import_timeout_s=self.import_timeout_s,
                                             max_open_instances=self.max_open_instances, **self.limits)
            except EnvLoadError as exc:
                self.load_errors[scenario] = str(exc)
                raise
            self.hosts[scenario] = host
            gc.collect()
            gc.freeze()  # the scenario's modules, app and template stay for the process's life
        return {"scenario": scenario, "cold_start_ms": host.cold_start_ms, "cold_start_cpu_ms": host.cold_start_cpu_ms,
                "tools": host.list_tools()}

    def create(self, scenario: str, n: int = 1) -> list[str]:
        self.load(scenario)
        host = self.hosts[scenario]
        ids = [host.create_instance() for _ in range(n)]
        for iid in ids:
            self.owner[iid] = host
        return ids

    def _host(self, iid: str) -> ScenarioHost:
        host = self.owner.get(iid)
        if host is None:
            raise UnknownInstanceError(f"instance {iid!r} is not hosted here (released, or its host restarted)")
        return host

    def call_tool(self, iid: str, name: str, arguments: Any = None) -> ToolResult:
        try:
            host = self._host(iid)
        except UnknownInstanceError as exc:
            return environment_error(f"environment error: {exc.args[0]}")
        return host.call_tool(iid, name, arguments)

    def reset(self, iid: str) -> None:
        self._host(iid).reset(iid)

    def open(self, iid: str) -> None:
        """Materialize the instance's database now (instead of on its first call)."""
        host = self._host(iid)
        host._conn(host._get(iid))

    def release(self, iid: str) -> None:
        host = self.owner.pop(iid, None)
        if host is not None:
            host.release(iid)

    def snapshot(self, iid: str, out_dir: Path | str) -> tuple[str, str]:
        a, b = self._host(iid).snapshot(iid, Path(out_dir))
        return str(a), str(b)

    def snapshot_bytes(self, iid: str) -> tuple[str, bytes, str, bytes]:
        return self._host(iid).snapshot_bytes(iid)

    def list_tools(self, scenario: str) -> list[dict[str, Any]]:
        self.load(scenario)
        return self.hosts[scenario].list_tools()

    def stats(self) -> dict[str, Any]:
        from awm_rl.isolation.limits import rss_bytes
        return {
            "pid": self.pid, "incarnation": self.incarnation, "rss_mb": rss_bytes() / 2**20,
            "scenarios": {k: {"instances": len(h.instances), "cold_start_ms": h.cold_start_ms,
                              "cold_start_cpu_ms": h.cold_start_cpu_ms,
                              "live_dbs": len(h._open),
                              "parked_dbs": sum(1 for i in h.instances.values() if i.image is not None),
                              "parked_kb": sum(i.image.nbytes for i in h.instances.values()
                                               if i.image is not None) / 1024,
                              "template_kb": len(h.template) / 1024}
                          for k, h in self.hosts.items()},
            "load_errors": dict(self.load_errors),
        }

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        self.hosts.clear()
        self.owner.clear()
