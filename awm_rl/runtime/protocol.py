"""The runtime's wire protocol: what a pool, `awm serve` or a test sends an environment host, and what comes back.

Three hops carry it: client (`pool.EnvironmentPool`, `served.ServedEnvironment`) -> host actor (Ray pickles
the wire form) -> a scenario's isolated worker process (length-prefixed JSON over its pipes, never pickle:
the worker runs generated code and is not trusted). This module alone defines

- the operations (`CallOp`, `ResetOp`, ... one dataclass each) and their single table `OPERATIONS`
  (wire kind -> class), the wire form (`wire()` / `decode_op`) and what each does on a `MultiHost`
  (`apply`), so a host dispatches by lookup, never by an if-chain on tuples;
- the results (`ToolResult`, `OpError`, `TimedResult`) and what an operation answers when it could not run
  (`failed`);
- the instance-id format (`instance_id`, `scenario_of`);
- the requests a host actor sends its scenario worker (`WORKER_METHODS`, looked up by the worker the same way);
- the pipe codec (`encode_message`, `read_message`).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

if TYPE_CHECKING:
    from awm_rl.runtime.host import MultiHost

ErrorKind = Literal["agent", "environment"]


# ---------------------------------------------------------------------------------------------
# results

@dataclass(slots=True)
class ToolResult:
    """What one tool call returned. `text` is what the agent sees (response JSON, or error text)."""

    ok: bool
    status: int
    text: str
    error_kind: ErrorKind | None = None
    elapsed_ms: float = 0.0
    detail: str | None = None  # for logs and the judge, never shown as the agent's text: e.g. the 500's exception

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def agent_error(status: int, text: str) -> ToolResult:
    return ToolResult(ok=False, status=status, text=text, error_kind="agent")


def environment_error(text: str, status: int = 503) -> ToolResult:
    return ToolResult(ok=False, status=status, text=text, error_kind="environment")


@dataclass(slots=True)
class OpError:
    """An operation that failed; `kind` is "load" (env code did not import), "unknown" or "internal"."""

    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class TimedResult:
    """An operation's result with its wall-clock and CPU time inside the host, in ms (`run_timed`)."""

    result: Any
    wall_ms: float
    cpu_ms: float

    @property
    def ok(self) -> bool:
        return not isinstance(self.result, OpError) and not (isinstance(self.result, ToolResult) and not self.result.ok)


# ---------------------------------------------------------------------------------------------
# instance ids: "<scenario>:<host prefix>:<number>" (scenario names never contain ":")

_ID_SEP = ":"


def instance_id(scenario: str, host_prefix: str, number: int) -> str:
    """The id of instance `number` of `scenario` on the host whose ids start with `host_prefix`."""
    return f"{scenario}{_ID_SEP}{host_prefix}{_ID_SEP}{number}"


def scenario_of(iid: str) -> str:
    """The scenario an instance id belongs to."""
    return iid.rsplit(_ID_SEP, 2)[0]


def snapshot_stem(iid: str) -> str:
    """The instance id as a file name stem (no ":")."""
    return iid.replace(_ID_SEP, ".")


# ---------------------------------------------------------------------------------------------
# operations

class ProtocolError(ValueError):
    """A wire operation that is not one this protocol knows (the message names what was wrong)."""


class _Op:
    """Shared behaviour of the operation dataclasses (each sets `kind` and implements `apply`)."""

    __slots__ = ()
    kind: ClassVar[str]
    loads: ClassVar[bool] = False  # may import the scenario's code (a slow first time)

    @property
    def instance(self) -> str | None:
        """The instance this operation acts on; None for those that name a scenario."""
        return getattr(self, "instance_id", None)

    @property
    def scenario(self) -> str:
        iid = self.instance
        return scenario_of(iid) if iid is not None else self.scenario_name  # type: ignore[attr-defined]  # ops without an instance name a scenario

    def wire(self) -> tuple:
        """The form that crosses Ray and the worker pipe: (kind, *fields)."""
        return (self.kind, *_FIELD_VALUES[type(self)](self))

    def apply(self, host: "MultiHost") -> Any:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class CallOp(_Op):
    """Call tool `tool` of instance `instance_id` -> ToolResult."""

    kind: ClassVar[str] = "call"
    instance_id: str
    tool: str
    arguments: dict[str, Any] | str | None = None

    def apply(self, host: "MultiHost") -> ToolResult:
        return host.call_tool(self.instance_id, self.tool, self.arguments)


@dataclass(frozen=True, slots=True)
class ResetOp(_Op):
    """Restore the instance's initial database -> None."""

    kind: ClassVar[str] = "reset"
    instance_id: str

    def apply(self, host: "MultiHost") -> None:
        host.reset(self.instance_id)


@dataclass(frozen=True, slots=True)
class OpenOp(_Op):
    """Materialize the instance's database now (instead of on its first call) -> None."""

    kind: ClassVar[str] = "open"
    instance_id: str

    def apply(self, host: "MultiHost") -> None:
        host.open(self.instance_id)


@dataclass(frozen=True, slots=True)
class ReleaseOp(_Op):
    """Free the instance on its host -> None."""

    kind: ClassVar[str] = "release"
    instance_id: str

    def apply(self, host: "MultiHost") -> None:
        host.release(self.instance_id)


@dataclass(frozen=True, slots=True)
class CreateOp(_Op):
    """`n` new instances of `scenario` (importing it first if needed) -> [instance id]."""

    kind: ClassVar[str] = "create"
    loads: ClassVar[bool] = True
    scenario_name: str
    n: int = 1

    def apply(self, host: "MultiHost") -> list[str]:
        return host.create(self.scenario_name, self.n)


@dataclass(frozen=True, slots=True)
class LoadOp(_Op):
    """Import `scenario` on the host (idempotent) -> {"scenario", "cold_start_ms", "cold_start_cpu_ms", "tools"}."""

    kind: ClassVar[str] = "load"
    loads: ClassVar[bool] = True
    scenario_name: str

    def apply(self, host: "MultiHost") -> dict[str, Any]:
        return host.load(self.scenario_name)


@dataclass(frozen=True, slots=True)
class SnapshotOp(_Op):
    """Write the instance's (initial, final) database files into `out_dir` -> (initial path, final path)."""

    kind: ClassVar[str] = "snapshot"
    instance_id: str
    out_dir: str

    def apply(self, host: "MultiHost") -> tuple[str, str]:
        return host.snapshot(self.instance_id, self.out_dir)


@dataclass(frozen=True, slots=True)
class SnapshotBytesOp(_Op):
    """The instance's databases as (initial name, image, final name, image): a `SnapshotOp` as an isolated
    worker answers it (it cannot write the caller's folder; its host actor writes the files)."""

    kind: ClassVar[str] = "snapshot_bytes"
    instance_id: str

    def apply(self, host: "MultiHost") -> tuple[str, bytes, str, bytes]:
        return host.snapshot_bytes(self.instance_id)


@dataclass(frozen=True, slots=True)
class OutputSchemasOp(_Op):
    """The tools' output schemas for `awm serve` -> {tool: [schema, wrapped]} (built where the app is)."""

    kind: ClassVar[str] = "output_schemas"
    loads: ClassVar[bool] = True
    scenario_name: str

    def apply(self, host: "MultiHost") -> dict[str, list]:
        from awm_rl.runtime.output_schemas import build_output_schemas

        host.load(self.scenario_name)
        loaded = host.hosts[self.scenario_name]
        return {name: [out.schema, out.wrapped]
                for name, out in build_output_schemas(loaded.env.app, loaded.tools).items()}


Operation = (CallOp | ResetOp | OpenOp | ReleaseOp | CreateOp | LoadOp | SnapshotOp | SnapshotBytesOp
             | OutputSchemasOp)
# The one table of operation kinds.
OPERATIONS: dict[str, type] = {cls.kind: cls for cls in Operation.__args__}


def _values_of(cls: type) -> Callable[[Any], tuple]:
    """A function giving an operation's field values in wire order, as a tuple (faster than `fields` per call)."""
    names = [f.name for f in fields(cls)]
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda op: (get(op),)


_FIELD_VALUES = {cls: _values_of(cls) for cls in OPERATIONS.values()}


def decode_op(op: Any) -> Operation:
    """A typed operation from its wire form (a typed one passes through); raises ProtocolError."""
    if isinstance(op, _Op):
        return op  # type: ignore[return-value]  # every _Op subclass is an Operation
    if not isinstance(op, (list, tuple)) or not op:
        raise ProtocolError(f"malformed operation {str(op)[:200]}: not a (kind, ...) sequence")
    cls = OPERATIONS.get(op[0]) if isinstance(op[0], str) else None
    if cls is None:
        raise ProtocolError(f"unknown operation {str(op[0])[:80]!r}; known: {', '.join(OPERATIONS)}")
    try:
        decoded = cls(*op[1:])
    except TypeError as exc:
        raise ProtocolError(f"malformed operation {str(op)[:200]}: {exc}") from None
    names = decoded.instance if decoded.instance is not None else decoded.scenario
    if not isinstance(names, str):
        raise ProtocolError(f"malformed operation {str(op)[:200]}: it must name an instance or a scenario")
    return decoded


def failed(op: Operation, message: str, kind: str = "unknown") -> ToolResult | OpError:
    """What `op` answers when it could not run: a call an environment error, anything else an `OpError`."""
    if isinstance(op, CallOp):
        return environment_error(f"environment error: {message}")
    return OpError(kind, message)


# ---------------------------------------------------------------------------------------------
# the requests a host actor sends a scenario worker over its pipe: {"m": method, "ops": [wire operations]}

@dataclass(frozen=True, slots=True)
class WorkerMethod:
    """One request a scenario worker answers: the `EnvHost` method it runs, and whether it takes the operations."""

    name: str
    takes_ops: bool

    def run(self, host: Any, ops: list) -> Any:
        method = getattr(host, self.name)
        return method(ops) if self.takes_ops else method()


WORKER_METHODS: dict[str, WorkerMethod] = {m.name: m for m in (
    WorkerMethod("run_batch", True), WorkerMethod("run_batch_timed", True),
    WorkerMethod("stats", False), WorkerMethod("info", False))}


# ---------------------------------------------------------------------------------------------
# the pipe codec: an 8-byte big-endian length, then JSON with tagged results and bytes

MAX_MESSAGE_BYTES = 1 << 30


def encode_message(value: Any) -> bytes:
    def default(obj: Any) -> Any:
        if isinstance(obj, ToolResult):
            return {"__awm_tool_result__": asdict(obj)}
        if isinstance(obj, OpError):
            return {"__awm_op_error__": [obj.kind, obj.message]}
        if isinstance(obj, _Op):
            return list(obj.wire())
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


def read_message(stream) -> Any:
    """One message from `stream`; EOFError when the other side closed (or sent more than the limit)."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the host worker closed its pipe")
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE_BYTES:
        raise EOFError(f"the host worker sent a {size}-byte message (limit {MAX_MESSAGE_BYTES})")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the host worker closed its pipe mid-message")
    return json.loads(data, object_hook=_decode_hook)


SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}\.db$")
