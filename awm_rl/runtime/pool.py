"""Client-side pool of isolated environment instances hosted on Ray actors.

Typical use (agent loop, GRPO trainer)::

    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(store_root) as pool:          # starts/joins Ray, creates the host actors
        h = pool.acquire("gofundme")                     # an isolated instance (fresh initial database)
        tools = pool.list_tools(h)                       # [{"name", "description", "input_schema"}, ...]
        r = pool.call_tool(h, "fetch_my_donation_history", {})   # ToolResult(ok, status, text, error_kind)
        initial_db, final_db = pool.snapshot(h)          # read-only files, for verifiers
        pool.reset(h)                                    # back to the initial database (~0.1 ms on the host)
        pool.release(h)

    # async (the trainer overlaps many rollouts): the same methods with an `_async` suffix
    h = await pool.acquire_async("rover"); r = await pool.call_tool_async(h, "search_walkers", "{}")

Operations are the typed records of `awm_rl.runtime.protocol` (`CallOp`, `ResetOp`, `OpenOp`, `ReleaseOp`,
`CreateOp`, `LoadOp`, `SnapshotOp`; importable from here too); `call_many` takes `ToolCall(handle, tool, arguments)`
records (tuples still work), and `run_timed(host, ops)` runs typed operations on one host, timed inside
it, as `TimedResult`s (what `benchmarks/serve.py` measures with).

`arguments` is a dict or a JSON object string (flat convention: path + query + body fields).
`ToolResult.error_kind` is None on success, "agent" for the caller's mistakes (unknown tool, bad
JSON, HTTP 4xx such as FastAPI's 422 text) and "environment" for environment failures (HTTP 5xx,
a call past its deadline, a crashed/restarted host: never a hang). `reset()` of an instance whose
host crashed replaces it with a fresh one under the same handle.

How it is fast: operations for one host actor are queued and sent as one batch per Ray round trip
(up to `max_batch` operations, at most `max_inflight_batches` batches in flight per actor, so the
next batch travels while the current one runs); `prefetch` keeps instances of recently used
scenarios created ahead so `acquire()` rarely waits for a round trip. Hard caps: `max_instances`
acquired at once (acquire waits, then raises `PoolExhausted`), the batch/in-flight limits per
actor, a per-call deadline on the host and a per-batch deadline here (a host that does not answer
is killed and restarted; its callers get Environment Errors).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_rl.isolation.limits import io_limits
from awm_rl.runtime.host import DEFAULT_IMPORT_TIMEOUT_S
from awm_rl.runtime.protocol import (
    CallOp,
    CreateOp,
    LoadOp,
    OpenOp,  # noqa: F401 - for `run_timed` callers, with the other operations
    Operation,
    OpError,
    ReleaseOp,
    ResetOp,
    SnapshotOp,
    TimedResult,
    ToolResult,
    decode_op,
    environment_error,
)

# A batch that may import a scenario's code waits for the host's import limit (plus its own calls).
IMPORT_BUDGET_S = DEFAULT_IMPORT_TIMEOUT_S + 25.0  # the actor allows import + 20 s startup
HOST_RESTART_WAIT_S = 20.0  # how long reset() keeps trying a host that Ray is restarting


class PoolError(RuntimeError):
    """Base class of the pool's own errors."""


class UnknownScenarioError(PoolError, KeyError):
    """The scenario is not in the artifact store (or has no environment code)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class EnvironmentLoadError(PoolError):
    """The scenario's environment code could not be loaded on a host (message has the traceback tail)."""


class PoolExhausted(PoolError):
    """`max_instances` instances are acquired and none was released in time."""


class PoolClosed(PoolError):
    """The pool was closed."""


class _HostUnavailable(PoolError):
    """A host did not answer (crashed, or restarting): a later try may reach its fresh incarnation."""


@dataclass(eq=False)
class InstanceHandle:
    """One acquired instance. Opaque to callers; `instance_id` may change when reset() replaces a lost instance."""

    scenario: str
    instance_id: str
    host: int
    snapshot_file: Path | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call for `EnvironmentPool.call_many`."""

    handle: "InstanceHandle"
    tool: str
    arguments: dict[str, Any] | str | None = None


class _HostLink:
    """One host actor: its queue of pending operations and the task that batches them."""

    def __init__(self, pool: "EnvironmentPool", index: int, actor: Any):
        self.pool = pool
        self.index = index
        self.actor = actor
        self.queue: deque[tuple[Operation, asyncio.Future | concurrent.futures.Future]] = deque()
        self.wakeup = asyncio.Event()
        self.slots = asyncio.Semaphore(pool.max_inflight_batches)
        self.instances = 0  # acquired + ready instances placed here
        self.inflight_budget = 0.0  # summed time budgets of the batches sent and not yet answered
        self.inflight_instances: dict[str, int] = {}  # instance id -> its operations in batches not yet answered
        self.task = asyncio.get_running_loop().create_task(self._dispatch())

    def put(self, op: Operation, fut) -> None:
        self.queue.append((op, fut))
        self.wakeup.set()

    async def _dispatch(self) -> None:
        """Send queued operations in batches, at most `max_inflight_batches` at a time. The host runs
        concurrent batches in any order, so an operation on an instance that already has one in flight waits
        for that batch's answer (and so do the instance's later ones): each instance sees its operations in
        the order they were queued; other instances' operations go ahead meanwhile."""
        while True:
            if not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            await self.slots.acquire()
            batch: list[tuple[Operation, Any]] = []
            waiting: list[tuple[Operation, Any]] = []
            held: set[str] = set()
            while self.queue and len(batch) < self.pool.max_batch:
                item = self.queue.popleft()
                iid = item[0].instance
                if iid is not None and (iid in held or iid in self.inflight_instances):
                    waiting.append(item)
                    held.add(iid)
                else:
                    batch.append(item)
            self.queue.extendleft(reversed(waiting))
            if not batch:  # everything queued waits for an answer: the next one wakes this loop
                self.slots.release()
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            for op, _ in batch:
                iid = op.instance
                if iid is not None:
                    self.inflight_instances[iid] = self.inflight_instances.get(iid, 0) + 1
            asyncio.get_running_loop().create_task(self._send(batch))

    def _budget(self, ops: list) -> float:
        """The longest this batch may take on the host: its calls, plus an import if it may load a scenario."""
        calls = sum(1 for op in ops if isinstance(op, CallOp))
        loads = any(op.loads for op in ops)
        return self.pool.call_timeout_s * max(1, calls) + (IMPORT_BUDGET_S if loads else 0.0)

    async def _send(self, batch: list) -> None:
        ops = [op for op, _ in batch]
        budget = self._budget(ops)
        # The actor runs one batch at a time: a batch queued behind others may wait for theirs too.
        self.inflight_budget += budget
        deadline = self.inflight_budget + self.pool.batch_slack_s
        try:
            ref = self.actor.run_batch.remote([op.wire() for op in ops])
            results = await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline)
        except asyncio.TimeoutError:
            self.pool._host_failed(self.index, True)
            results = [_HostFailure(f"environment error: host {self.index} did not answer within {deadline:.0f}s; "
                                    "it is being restarted and its instances are lost")] * len(ops)
        except Exception as exc:  # noqa: BLE001 - actor died / unavailable: every op in the batch fails
            self.pool._host_failed(self.index, False)
            results = [_HostFailure(f"environment error: host {self.index} crashed or restarted "
                                    f"({type(exc).__name__}); its instances are lost")] * len(ops)
        finally:
            self.inflight_budget -= budget
            self.slots.release()
            for op in ops:
                iid = op.instance
                if iid is not None:
                    left = self.inflight_instances[iid] - 1
                    if left:
                        self.inflight_instances[iid] = left
                    else:
                        del self.inflight_instances[iid]
            if self.queue:
                self.wakeup.set()
        for (_, fut), res in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(res)


@dataclass(slots=True)
class _HostFailure:
    message: str


def _nodes_alive() -> int:
    import ray

    try:
        return sum(1 for n in ray.nodes() if n.get("Alive"))
    except Exception:  # noqa: BLE001 - no cluster information: assume one machine
        return 1


def _as_tool_result(res: Any) -> ToolResult:
    if isinstance(res, ToolResult):
        return res
    if isinstance(res, _HostFailure):
        return environment_error(res.message)
    if isinstance(res, OpError):
        return environment_error(f"environment error: {res.message}")
    return environment_error(f"environment error: unexpected host answer {type(res).__name__}")


class EnvironmentPool:
    """Isolated, resettable environment instances on Ray host actors (see module docstring)."""

    def __init__(self, store_root: Path | str | None = None, *, num_hosts: int | None = None,
                 max_instances: int = 4096, prefetch: int = 8, call_timeout_s: float = 10.0,
                 max_batch: int = 64, max_inflight_batches: int = 2, batch_slack_s: float = 30.0,
                 acquire_timeout_s: float = 60.0, host_memory_mb: int | None = 6144,
                 host_rss_cap_mb: int | None = 8192, ray_address: str | None = None,
                 snapshot_dir: Path | str | None = None, actor_options: dict[str, Any] | None = None,
                 max_open_instances: int | None = None):
        from awm_resources.ray_cluster import init_ray
        from awm_resources.store import ArtifactStore
        from awm_rl.runtime.actor import remote_host_class

        self.store = ArtifactStore(store_root)
        self.max_instances = max_instances
        self.prefetch = max(0, prefetch)
        self.call_timeout_s = call_timeout_s
        self.max_batch = max_batch
        self.max_inflight_batches = max_inflight_batches
        self.batch_slack_s = batch_slack_s
        self.acquire_timeout_s = acquire_timeout_s
        self.ray_info = init_ray(ray_address)
        if num_hosts is None:
            num_hosts = max(1, min(4, os.cpu_count() or 1))
        self._own_snapshot_dir = snapshot_dir is None
        # Snapshots are written by the hosts and read here: on one machine a RAM folder; when the cluster has
        # more nodes, a folder of the store (which every node shares), since a host may run elsewhere.
        base: str | None
        if _nodes_alive() > 1:
            base = str(self.store.root / ".snapshots")
            os.makedirs(base, exist_ok=True)
        else:
            base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.snapshot_dir = Path(snapshot_dir) if snapshot_dir else Path(tempfile.mkdtemp(prefix="awm-snapshots-", dir=base))
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        # `actor_options` place the hosts, e.g. {"resources": {"cpu_worker": 0.01}} to keep them on CPU
        # nodes of a cluster whose CPU workers advertise that custom resource (GPU nodes do not).
        Actor = remote_host_class(**(actor_options or {}))
        # `max_open_instances`: open instance databases per scenario and host before idle ones are parked
        host_options: dict[str, Any] = {} if max_open_instances is None else {"max_open_instances": max_open_instances}
        # the answer and request limits as this driver reads them (AWM_MAX_ANSWER_BYTES, AWM_MAX_REQUEST_BYTES)
        host_options.update(io_limits(None, None))
        self._actors = [Actor.remote(str(self.store.root), call_timeout_s=call_timeout_s,
                                     memory_mb=host_memory_mb, rss_cap_mb=host_rss_cap_mb, **host_options)
                        for _ in range(num_hosts)]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="awm-env-pool", daemon=True)
        self._thread.start()
        self._closed = False
        self._links: list[_HostLink] = self._on_loop(self._make_links()).result()
        self._tools: dict[str, list[dict[str, Any]]] = {}
        self._cold_start_ms: dict[str, float] = {}
        self._cold_start_cpu_ms: dict[str, float] = {}
        self._ready: dict[str, deque[tuple[int, str]]] = {}
        self._live: set[int] = set()  # id() of acquired handles
        self._handles: dict[int, InstanceHandle] = {}
        self._refilling: set[str] = set()
        self._cap = asyncio.Semaphore(max_instances)  # used on the pool loop only
        self._load_locks: dict[str, asyncio.Lock] = {}
        self._homes: dict[str, list[int]] = {}  # scenario -> the hosts that run a worker for it

    # -- plumbing ----------------------------------------------------------------------------
    async def _make_links(self) -> list[_HostLink]:
        return [_HostLink(self, i, a) for i, a in enumerate(self._actors)]

    def _on_loop(self, coro) -> concurrent.futures.Future:
        if self._closed:
            coro.close()
            raise PoolClosed("the environment pool is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _submit(self, host: int, op: Operation) -> concurrent.futures.Future:
        """Queue one operation for a host from any thread; the future resolves with its result."""
        if self._closed:
            raise PoolClosed("the environment pool is closed")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._links[host].put, op, fut)
        return fut

    async def _op(self, host: int, op: Operation) -> Any:
        """Queue one operation from the pool loop and await its result."""
        fut = self._loop.create_future()
        self._links[host].put(op, fut)
        return await fut

    def _host_failed(self, host: int, kill: bool = False) -> None:
        for ready in self._ready.values():
            stale = [x for x in ready if x[0] == host]
            for x in stale:
                ready.remove(x)
                self._links[host].instances -= 1
        if kill:
            import ray
            try:
                ray.kill(self._actors[host], no_restart=False)
            except Exception:  # noqa: BLE001 - a host being replaced may be dead already
                pass

    def _check_live(self, handle: InstanceHandle) -> None:
        if id(handle) not in self._live:
            raise PoolError(f"instance handle {handle.instance_id!r} was released (or belongs to another pool)")

    # -- scenarios ---------------------------------------------------------------------------
    def scenarios(self) -> list[str]:
        """Scenarios in the store that have environment code."""
        return [s for s in self.store.list_scenarios() if (self.store.scenario_dir(s) / "server.py").is_file()]

    def _validate(self, scenario: str) -> None:
        try:
            folder = self.store.scenario_dir(scenario)
        except ValueError:
            folder = None
        if folder is None or not (folder / "server.py").is_file() or not (folder / "initial.db").is_file():
            available = ", ".join(self.scenarios()) or "none"
            why = "not in the store" if folder is None or not folder.is_dir() else "has no server.py/initial.db"
            raise UnknownScenarioError(f"unknown scenario {scenario!r}: {why} (store {self.store.root}); "
                                       f"scenarios with environment code: {available}")

    async def _ensure_loaded(self, scenario: str, host: int) -> None:
        if scenario in self._tools:
            return
        lock = self._load_locks.setdefault(scenario, asyncio.Lock())
        async with lock:
            if scenario in self._tools:
                return
            res = await self._op(host, LoadOp(scenario))
            if isinstance(res, (OpError, _HostFailure)):
                raise EnvironmentLoadError(f"environment {scenario!r} could not be loaded: {res.message}")
            self._tools[scenario] = res["tools"]
            self._cold_start_ms[scenario] = res["cold_start_ms"]
            self._cold_start_cpu_ms[scenario] = res["cold_start_cpu_ms"]

    def _host_for(self, scenario: str) -> int:
        """Where new instances of `scenario` go. Each host runs one sandboxed worker per scenario it serves,
        so a scenario stays on its hosts (fewer processes, warm workers) and spreads to the host serving the
        fewest scenarios only once its hosts hold their share of the instance cap."""
        homes = self._homes.setdefault(scenario, [])
        share = max(1, self.max_instances // max(len(self._links), 1))
        home = min(homes, key=lambda i: self._links[i].instances, default=None)
        if home is not None and (self._links[home].instances < share or len(homes) == len(self._links)):
            return home
        served = {i: sum(i in h for h in self._homes.values()) for i in range(len(self._links))}
        fresh = min((i for i in range(len(self._links)) if i not in homes),
                    key=lambda i: (served[i], self._links[i].instances))
        homes.append(fresh)
        return fresh

    async def _create(self, scenario: str, n: int, host: int | None = None) -> list[tuple[int, str]]:
        host = self._host_for(scenario) if host is None else host
        await self._ensure_loaded(scenario, host)
        self._links[host].instances += n
        res = await self._op(host, CreateOp(scenario, n))
        if isinstance(res, list):
            return [(host, iid) for iid in res]
        self._links[host].instances -= n
        if isinstance(res, _HostFailure):
            raise _HostUnavailable(f"could not create an instance of {scenario!r}: {res.message}")
        if isinstance(res, OpError) and res.kind == "load":
            raise EnvironmentLoadError(f"environment {scenario!r} could not be loaded: {res.message}")
        raise PoolError(f"could not create an instance of {scenario!r}: {res.message}")

    async def _refill(self, scenario: str) -> None:
        try:
            got = await self._create(scenario, self.prefetch)
            self._ready.setdefault(scenario, deque()).extend(got)
        except Exception:  # noqa: BLE001 - prefetch is best effort; acquire reports real errors
            pass
        finally:
            self._refilling.discard(scenario)

    async def _acquire(self, scenario: str) -> InstanceHandle:
        try:
            await asyncio.wait_for(self._cap.acquire(), self.acquire_timeout_s)
        except asyncio.TimeoutError:
            raise PoolExhausted(f"all {self.max_instances} instances are in use; none was released within "
                                f"{self.acquire_timeout_s:.0f}s (raise max_instances or release handles)") from None
        try:
            ready = self._ready.setdefault(scenario, deque())
            if not ready:
                got = await self._create(scenario, max(1, self.prefetch))
                ready.extend(got)
            host, iid = ready.popleft()
            if self.prefetch and len(ready) < self.prefetch // 2 + 1 and scenario not in self._refilling:
                self._refilling.add(scenario)
                self._loop.create_task(self._refill(scenario))
        except BaseException:
            self._cap.release()
            raise
        handle = InstanceHandle(scenario=scenario, instance_id=iid, host=host)
        self._live.add(id(handle))
        self._handles[id(handle)] = handle
        return handle

    async def _release(self, handle: InstanceHandle) -> None:
        if id(handle) not in self._live:
            return
        self._live.discard(id(handle))
        self._handles.pop(id(handle), None)
        self._cap.release()
        self._links[handle.host].instances -= 1
        self._links[handle.host].put(ReleaseOp(handle.instance_id), self._loop.create_future())
        if handle.snapshot_file is not None:
            handle.snapshot_file.unlink(missing_ok=True)

    async def _reset(self, handle: InstanceHandle) -> None:
        self._check_live(handle)
        res = await self._op(handle.host, ResetOp(handle.instance_id))
        if isinstance(res, (OpError, _HostFailure)):
            # The instance is gone (its host restarted): replace it under the same handle.
            self._links[handle.host].instances -= 1
            handle.host, handle.instance_id = await self._replacement(handle.scenario)

    async def _replacement(self, scenario: str) -> tuple[int, str]:
        """A fresh instance of `scenario`; a host that is still restarting is tried again for up to
        `HOST_RESTART_WAIT_S` (a busy machine takes seconds to bring a crashed host back)."""
        until = time.monotonic() + HOST_RESTART_WAIT_S
        while True:
            try:
                (found,) = await self._create(scenario, 1)
                return found
            except _HostUnavailable:
                if time.monotonic() > until:
                    raise
                await asyncio.sleep(0.5)

    async def _snapshot(self, handle: InstanceHandle) -> tuple[Path, Path]:
        self._check_live(handle)
        res = await self._op(handle.host, SnapshotOp(handle.instance_id, str(self.snapshot_dir)))
        if isinstance(res, (OpError, _HostFailure)):
            raise PoolError(f"snapshot of {handle.instance_id!r} failed: {res.message}")
        initial, final = Path(res[0]), Path(res[1])
        handle.snapshot_file = final
        return initial, final

    # -- public API (sync) -------------------------------------------------------------------
    def acquire(self, scenario: str) -> InstanceHandle:
        """An isolated instance of `scenario` with the initial database. Raises UnknownScenarioError,
        EnvironmentLoadError (with the import traceback), PoolExhausted."""
        self._validate(scenario)
        return self._on_loop(self._acquire(scenario)).result()

    async def _create_placed(self, scenario: str, n: int) -> list[list[tuple[int, str]]]:
        """n instances placed as `_host_for` places one: on the scenario's hosts up to their share of the cap,
        then on the next host; once the scenario runs on every host, the rest evenly (one create per host)."""
        share = max(1, self.max_instances // max(len(self._links), 1))
        parts, left = [], n
        while left:
            host = self._host_for(scenario)
            if len(self._homes[scenario]) == len(self._links):
                per_host = [left // len(self._links) + (1 if i < left % len(self._links) else 0)
                            for i in range(len(self._links))]
                parts += await asyncio.gather(*(self._create(scenario, k, host=i) for i, k in enumerate(per_host) if k))
                break
            k = min(left, max(1, share - self._links[host].instances))
            parts.append(await self._create(scenario, k, host=host))
            left -= k
        return parts

    async def _acquire_many(self, scenario: str, n: int) -> list[InstanceHandle]:
        """n instances, created in one operation per host they go to (see `_create_placed`), counted against the cap."""
        got_cap = 0
        try:
            for _ in range(n):
                await asyncio.wait_for(self._cap.acquire(), self.acquire_timeout_s)
                got_cap += 1
            parts = await self._create_placed(scenario, n)
        except asyncio.TimeoutError:
            for _ in range(got_cap):
                self._cap.release()
            raise PoolExhausted(f"cannot hold {n} more instances: the cap is {self.max_instances} "
                                f"and none was released within {self.acquire_timeout_s:.0f}s") from None
        except BaseException:
            for _ in range(got_cap):
                self._cap.release()
            raise
        handles = []
        for host, iid in (x for part in parts for x in part):
            h = InstanceHandle(scenario=scenario, instance_id=iid, host=host)
            self._live.add(id(h))
            self._handles[id(h)] = h
            handles.append(h)
        return handles

    def acquire_many(self, scenario: str, n: int) -> list[InstanceHandle]:
        """n instances of `scenario` at once (one create operation per host)."""
        self._validate(scenario)
        return self._on_loop(self._acquire_many(scenario, n)).result()

    async def acquire_many_async(self, scenario: str, n: int) -> list[InstanceHandle]:
        self._validate(scenario)
        return await self._bridge(self._acquire_many(scenario, n))

    def prefetch_instances(self, scenario: str, n: int) -> None:
        """Create `n` instances of `scenario` ahead of time (returns at once; errors surface at acquire)."""
        self._validate(scenario)

        async def go():
            try:
                got = await self._create(scenario, n)
                self._ready.setdefault(scenario, deque()).extend(got)
            except Exception:  # noqa: BLE001 - prefetch is best effort; errors surface at acquire
                pass
        self._on_loop(go())

    def list_tools(self, handle: InstanceHandle) -> list[dict[str, Any]]:
        """The scenario's tools: [{"name", "description", "input_schema"}] (shared list: do not mutate)."""
        return self._tools[handle.scenario]

    def call_tool(self, handle: InstanceHandle, name: str, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """Call one tool; never raises for environment problems (they come back as error_kind="environment").

        The sync path sends its own one-operation batch straight from the calling thread (lowest
        latency); use `call_many` or the async API to batch many calls per round trip.
        """
        import ray
        from ray.exceptions import GetTimeoutError

        self._check_live(handle)
        if self._closed:
            raise PoolClosed("the environment pool is closed")
        deadline = self.call_timeout_s + self.batch_slack_s
        try:
            res = ray.get(self._actors[handle.host].run_batch.remote([CallOp(handle.instance_id, name, arguments).wire()]),
                          timeout=deadline)[0]
        except GetTimeoutError:
            self._loop.call_soon_threadsafe(self._host_failed, handle.host, True)
            res = _HostFailure(f"environment error: host {handle.host} did not answer within {deadline:.0f}s; "
                               "it is being restarted and its instances are lost")
        except Exception as exc:  # noqa: BLE001 - actor died / unavailable
            self._loop.call_soon_threadsafe(self._host_failed, handle.host, False)
            res = _HostFailure(f"environment error: host {handle.host} crashed or restarted "
                               f"({type(exc).__name__}); its instances are lost")
        return _as_tool_result(res)

    def call_many(self, calls: "list[ToolCall] | list[tuple[InstanceHandle, str, dict[str, Any] | str | None]]"
                  ) -> list[ToolResult]:
        """Many calls at once (batched per host); results in the same order. Each call is a `ToolCall`
        (or a (handle, tool, arguments) tuple, as before)."""
        typed = [c if isinstance(c, ToolCall) else ToolCall(*c) for c in calls]
        for c in typed:
            self._check_live(c.handle)
        futs = [self._submit(c.handle.host, CallOp(c.handle.instance_id, c.tool, c.arguments)) for c in typed]
        return [_as_tool_result(f.result()) for f in futs]

    def reset(self, handle: InstanceHandle) -> None:
        """Restore the instance's initial database (replaces the instance if its host was restarted)."""
        self._on_loop(self._reset(handle)).result()

    def snapshot(self, handle: InstanceHandle) -> tuple[Path, Path]:
        """(initial, final) read-only database files; the final one is overwritten by the next snapshot
        of this handle and deleted on release."""
        return self._on_loop(self._snapshot(handle)).result()

    def release(self, handle: InstanceHandle) -> None:
        """Give the instance back (its database is freed on the host)."""
        if not self._closed:
            self._on_loop(self._release(handle)).result()

    def cold_start_ms(self, scenario: str, *, cpu: bool = False) -> float | None:
        """How long the first host took to import the scenario, wall clock or its CPU time (None until loaded)."""
        return (self._cold_start_cpu_ms if cpu else self._cold_start_ms).get(scenario)

    @property
    def num_hosts(self) -> int:
        """How many host actors the pool placed instances on."""
        return len(self._actors)

    def run_timed(self, host: int, ops: list[Operation]) -> list[TimedResult]:
        """Run typed operations on one host actor directly, in one batch, timed inside the host
        (benchmarks and diagnostics: no queueing, no prefetch, no cap; instances created here are not
        handles and must be released with a `ReleaseOp`)."""
        import ray

        if self._closed:
            raise PoolClosed("the environment pool is closed")
        out = ray.get(self._actors[host].run_batch_timed.remote([decode_op(op).wire() for op in ops]),
                      timeout=self.call_timeout_s * max(1, len(ops)) + IMPORT_BUDGET_S + self.batch_slack_s)
        return [TimedResult(res, float(wall), float(cpu)) for res, wall, cpu in out]

    def isolation(self) -> str:
        """How the hosts contain generated code, one line (`sandbox.isolation_summary`; hosts that differ, joined)."""
        from awm_rl.isolation.sandbox import isolation_summary

        return "; ".join(sorted({isolation_summary(str(st.get("isolation")), st.get("seccomp"))
                                 for st in self.host_stats() if st.get("isolation")})) or "unknown"

    def host_stats(self) -> list[dict[str, Any]]:
        """Per host actor: pid, incarnation, resident MB, instances per scenario (a live round trip)."""
        import ray
        out = []
        for a in self._actors:
            try:
                out.append(ray.get(a.stats.remote(), timeout=30))
            except Exception as exc:  # noqa: BLE001 - reported in the host's stats entry
                out.append({"error": f"{type(exc).__name__}: {exc}"})
        return out

    # -- public API (async) ------------------------------------------------------------------
    async def _bridge(self, coro):
        return await asyncio.wrap_future(self._on_loop(coro))

    async def acquire_async(self, scenario: str) -> InstanceHandle:
        self._validate(scenario)
        return await self._bridge(self._acquire(scenario))

    async def call_tool_async(self, handle: InstanceHandle, name: str,
                              arguments: dict[str, Any] | str | None = None) -> ToolResult:
        self._check_live(handle)
        res = await asyncio.wrap_future(self._submit(handle.host, CallOp(handle.instance_id, name, arguments)))
        return _as_tool_result(res)

    async def reset_async(self, handle: InstanceHandle) -> None:
        await self._bridge(self._reset(handle))

    async def snapshot_async(self, handle: InstanceHandle) -> tuple[Path, Path]:
        return await self._bridge(self._snapshot(handle))

    async def release_async(self, handle: InstanceHandle) -> None:
        if not self._closed:
            await self._bridge(self._release(handle))

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release everything, stop the host actors and remove snapshot files."""
        if self._closed:
            return
        import ray

        for h in list(self._handles.values()):
            try:
                self.release(h)
            except Exception:  # noqa: BLE001 - closing: the hosts are killed next anyway
                pass
        self._closed = True
        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - closing: the actor may be gone already
                pass
        async def stop() -> None:
            for link in self._links:
                link.task.cancel()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._loop.stop()
        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(timeout=10)
        if self._own_snapshot_dir:
            shutil.rmtree(self.snapshot_dir, ignore_errors=True)

    def __enter__(self) -> "EnvironmentPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
