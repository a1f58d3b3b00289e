"""Sandbox worker for untrusted verifier code (stdlib only; started by awm_rl.isolation.verification).

Runs as its own interpreter (`python -I -S this_file MEMORY_MB CPU_BUDGET_S [own-pid-namespace]`),
normally inside bubblewrap (`awm_rl.isolation.sandbox`: no network, read-only system, this file
read-only, no writable folder, own PID namespace, uid nobody), with no project imports and a clean
environment. It reads one JSON job per line from a private copy of stdin and writes one JSON
outcome per line to a private copy of stdout.

This process is a zygote: it never runs verifier code itself. Each job runs in a fresh child forked
from it, under CPU/memory/file-size limits, an audit hook that refuses writes, process creation,
network and foreign databases, and an import allow-list; the child reports through its own pipe and
exits. Whatever a verifier patches (this module's functions, the audit hook's state, builtins)
dies with its child, so no verifier can change another's verdict; after each job every other
process the child left behind is killed before the next job starts. The zygote is not dumpable
(no ptrace, no /proc/<pid>/mem or fd access from the children) and under root without a user
namespace it drops to `nobody` (file permissions then protect the project). In the sandbox it first
applies the seccomp filter of `awm_rl/isolation/seccomp.py` (stdlib only, loaded by path), which every job
inherits, or exits.
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import os
import resource
import select
import signal
import sys
import time
import types
import urllib.parse

# Modules a verifier may import (top-level names). Imported up front, before the audit hook
# is armed, so that a verifier's imports are plain sys.modules lookups.
ALLOWED_IMPORTS = frozenset(
    "__future__ sqlite3 json re datetime zoneinfo time calendar math cmath decimal fractions "
    "numbers statistics collections itertools functools operator heapq bisect typing dataclasses "
    "enum copy string textwrap difflib unicodedata hashlib base64 uuid ast html".split()
)
# Submodules allowed although their package is not (urllib.request would reach for the network):
# `import urllib.parse` and `from urllib import parse`. The verifier prompts list these names too.
ALLOWED_SUBMODULES = frozenset({"urllib.parse"})
# Internals that allowed modules import lazily through builtins.__import__ (datetime.strptime
# imports _strptime, for example); loaded up front and then allowed.
_INTERNAL_IMPORTS = frozenset(
    "_strptime _datetime _decimal _pydecimal _json _collections_abc _statistics _string locale".split()
)
# Loaded up front but never importable by verifiers: the worker's own needs, and what allowed
# modules import lazily from Python code (outside the allow-list; zoneinfo looks for the tzdata
# package through importlib.resources). Nothing may load late: after the drop to `nobody` the
# standard library itself may be unreadable.
_PRELOADED = ["collections.abc", "inspect", "importlib.resources"]
for _name in sorted(ALLOWED_IMPORTS | _INTERNAL_IMPORTS | ALLOWED_SUBMODULES) + _PRELOADED:
    try:
        __import__(_name)
    except ImportError:
        pass
import inspect  # noqa: E402  (after the pre-imports on purpose)
import sqlite3  # noqa: E402 - as above


def _load_clock() -> types.ModuleType:
    """awm_resources/clock.py (stdlib only; this worker imports no project module): the environment's fixed clock,
    which the databases a job names carry in their header."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "awm_resources",
                        "clock.py")
    spec = importlib.util.spec_from_file_location("_awm_clock", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise RuntimeError(f"verifier worker: the clock module is missing at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CLOCK = _load_clock()
_CLOCK.datetime_module()  # built now: nothing loads once a verifier runs
_CLOCK_NOW: list = [None]  # the current job's environment "now" (None: the wall clock)

MAX_RESULT_BYTES = 1_000_000
NOBODY = 65534
MAX_CAPTURED_OUTPUT = 4_000
_VERIFIER_MODULE = "verifier"

# Audit events refused while verifier code runs (prefix match).
_BLOCKED_EVENT_PREFIXES = (
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "os.remove", "os.unlink", "os.rmdir", "os.rename", "os.replace", "os.mkdir",
    "os.chmod", "os.lchmod", "os.chown", "os.lchown", "os.chflags", "os.truncate", "os.link",
    "os.symlink", "os.utime", "os.putenv", "os.unsetenv", "os.setxattr", "os.removexattr",
    "os.chdir", "os.fchmod", "os.fchown", "shutil.", "subprocess.", "socket.", "ctypes.",
    "resource.setrlimit", "resource.prlimit", "sqlite3.enable_load_extension",
    "sqlite3.load_extension", "pty.", "webbrowser.", "urllib.Request", "ftplib.", "smtplib.",
    "poplib.", "imaplib.", "nntplib.", "telnetlib.", "http.client.", "signal.pthread_kill",
    "fcntl.", "mmap.", "_posixsubprocess.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SQLITE_ATTACH = 24
_SQLITE_OK, _SQLITE_DENY = 0, 1


class VerifierTimeout(BaseException):
    """Raised into verifier code when its time is up (BaseException: `except Exception` misses it)."""


class _Job:
    """State of the verifier currently running; None between jobs."""

    def __init__(self, allowed_dbs: set[str], deadline: float) -> None:
        self.allowed_dbs = allowed_dbs
        self.deadline = deadline
        self.violation: tuple[str, str] | None = None  # (error_kind, detail), first one wins
        self.timed_out = False

    def flag(self, kind: str, detail: str) -> None:
        if self.violation is None:
            self.violation = (kind, detail)


_JOB: _Job | None = None


def _db_target(database: object) -> str | None:
    """The file a sqlite3.connect argument points at (None for in-memory databases)."""
    if isinstance(database, bytes):
        database = database.decode("utf-8", "replace")
    # a path-like, or os.fspath raises the TypeError sqlite3.connect would
    target = os.fspath(database) if not isinstance(database, str) else database  # type: ignore[call-overload]  # see above
    if target in ("", ":memory:"):
        return None
    if target.startswith("file:"):
        parsed = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qs(parsed.query)
        if query.get("mode") == ["memory"]:
            return None
        target = urllib.parse.unquote(parsed.path or parsed.netloc)
    return os.path.realpath(target)


def _authorizer(action: int, *_args: object) -> int:
    """Refuse ATTACH: a verifier reads the two databases it was given, nothing else."""
    return _SQLITE_DENY if action == _SQLITE_ATTACH else _SQLITE_OK


def _progress_handler() -> int:
    """Abort a long SQLite statement once the verifier's time is up."""
    job = _JOB
    if job is not None and time.monotonic() > job.deadline:
        job.timed_out = True
        return 1
    return 0


def _audit(event: str, args: tuple) -> None:
    job = _JOB
    if job is None:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes:
            job.flag("forbidden_operation", f"verifier tried to open {path!r} for writing")
            raise PermissionError(f"verifier sandbox: writing files is not allowed ({path!r})")
        return
    if event == "sqlite3.connect":
        target = _db_target(args[0])
        if target is not None and target not in job.allowed_dbs:
            job.flag("forbidden_operation", f"verifier tried to open database {args[0]!r}")
            raise PermissionError(
                f"verifier sandbox: only the initial and final databases may be opened ({args[0]!r})"
            )
        return
    if event.startswith(_BLOCKED_EVENT_PREFIXES):
        job.flag("forbidden_operation", f"verifier attempted {event}{_short(args)}")
        raise PermissionError(f"verifier sandbox: {event} is not allowed")


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) <= 200 else text[:200] + "...)"


def _guarded_connect(*args, **kwargs):
    """sqlite3.connect for verifiers: no ATTACH, and long statements stop when time is up."""
    conn = sqlite3.connect(*args, **kwargs)
    _CLOCK.fix_sqlite(conn, _CLOCK_NOW[0])
    conn.set_authorizer(_authorizer)
    conn.set_progress_handler(_progress_handler, 1000)
    return conn


def _sqlite_shim() -> types.ModuleType:
    """The sqlite3 module as verifiers see it: the real one with a guarded connect."""
    shim = types.ModuleType("sqlite3", sqlite3.__doc__)
    shim.__dict__.update({k: v for k, v in vars(sqlite3).items() if not k.startswith("__")})
    shim.__dict__["connect"] = _guarded_connect
    return shim


def allowed_imports() -> list[str]:
    """Every module name a verifier may import, sorted: what the verifier prompts show the model."""
    return sorted(ALLOWED_IMPORTS | ALLOWED_SUBMODULES)


def _allowed_submodule(name: str, fromlist) -> bool:
    if name in ALLOWED_SUBMODULES:
        return True
    return bool(fromlist) and all(f"{name}.{f}" in ALLOWED_SUBMODULES for f in fromlist)


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split(".", 1)[0]
    if level == 0 and name in _INTERNAL_IMPORTS and name in sys.modules:
        return _REAL_IMPORT(name, globals, locals, fromlist, level)
    if level == 0 and name == "sqlite3":
        return _SQLITE_SHIM
    if level == 0 and name == "datetime":  # with the fixed classes: the job's environment clock
        return _CLOCK.datetime_module()
    if level != 0 or (top not in ALLOWED_IMPORTS and not _allowed_submodule(name, fromlist)):
        if _JOB is not None:
            _JOB.flag(
                "forbidden_import",
                f"import of {name!r} is not allowed (allowed: {', '.join(allowed_imports())})",
            )
        raise ImportError(f"verifier sandbox: import of {name!r} is not allowed")
    return _REAL_IMPORT(name, globals, locals, fromlist, level)


_REAL_IMPORT = builtins.__import__
_SQLITE_SHIM = _sqlite_shim()


def _sandbox_builtins() -> dict:
    safe = dict(vars(builtins))
    safe["__import__"] = _guarded_import
    for name in ("input", "breakpoint", "help", "exit", "quit", "copyright", "credits", "license"):
        safe.pop(name, None)
    return safe


def _on_time_up(signum, _frame) -> None:
    if _JOB is not None:
        _JOB.timed_out = True
        raise VerifierTimeout("cpu" if signum == signal.SIGXCPU else "wall")


def _call_verifier(request: dict) -> dict:
    """Compile, exec and call the verifier; returns the outcome fields (without timing)."""
    try:
        # dont_inherit: this file's `from __future__ import annotations` must not leak into it.
        compiled = compile(request["code"], "<verifier>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return {"error_kind": "syntax_error", "error": f"verifier code does not compile: {exc}"}
    module = types.ModuleType(_VERIFIER_MODULE)
    module.__dict__["__builtins__"] = _sandbox_builtins()
    # Registered so that dataclasses and typing can resolve string annotations in the verifier.
    sys.modules[_VERIFIER_MODULE] = module
    namespace = module.__dict__
    exec(compiled, namespace)  # noqa: S102 - the verifier under test, in this limited worker process
    function_name = request["function"]
    function = namespace.get(function_name)
    if not callable(function):
        defined = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("__"))
        return {
            "error_kind": "missing_function",
            "error": f"verifier code defines no function {function_name!r} (defines: {defined})",
        }
    kwargs = {}
    try:
        params = inspect.signature(function).parameters
        accepts_answer = "final_answer" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
    except (TypeError, ValueError):
        accepts_answer = False
    if accepts_answer:
        kwargs["final_answer"] = request.get("final_answer")
    result = function(request["initial"], request["final"], **kwargs)
    if not isinstance(result, dict):
        return {
            "error_kind": "bad_return",
            "error": f"{function_name} returned {type(result).__name__}, expected dict: {str(result)[:300]}",
        }
    try:
        text = json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        return {"error_kind": "bad_return", "error": f"{function_name} returned a dict that is not JSON: {exc}"}
    if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
        return {
            "error_kind": "bad_return",
            "error": f"{function_name} returned {len(text)} characters of JSON (limit {MAX_RESULT_BYTES})",
        }
    return {"result_json": text}


def _run_job(request: dict) -> dict:
    global _JOB
    timeout_s = float(request["timeout_s"])
    allowed = {os.path.realpath(request["initial"]), os.path.realpath(request["final"])}
    _CLOCK_NOW[0] = _CLOCK.file_clock(request["initial"])  # datetime and SQLite's 'now' read the environment's clock
    _CLOCK.set_now(_CLOCK_NOW[0])
    job = _Job(allowed, time.monotonic() + timeout_s)
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu_used = int(used.ru_utime + used.ru_stime)
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = cpu_used + int(timeout_s) + 1
    if cpu_hard != resource.RLIM_INFINITY:
        soft = min(soft, cpu_hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))
    captured = io.StringIO()
    saved_streams = sys.stdout, sys.stderr, sys.stdin
    sys.stdout = sys.stderr = captured
    sys.stdin = None
    start = time.perf_counter()
    outcome: dict
    _JOB = job
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        try:
            outcome = _call_verifier(request)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        gc.collect()
    except VerifierTimeout as exc:
        outcome = {"error_kind": "timeout", "error": f"verifier exceeded its {exc} time limit of {timeout_s:g}s"}
    except MemoryError:
        outcome = {"error_kind": "memory", "error": "verifier exceeded its memory limit"}
    except RecursionError as exc:
        outcome = {"error_kind": "crash", "error": f"RecursionError: {exc}"}
    except BaseException as exc:  # noqa: BLE001  untrusted code may raise anything, SystemExit included
        outcome = {"error_kind": "crash", "error": _describe(exc)}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _JOB = None
        sys.modules.pop(_VERIFIER_MODULE, None)
        sys.stdout, sys.stderr, sys.stdin = saved_streams
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    if job.timed_out:
        outcome = {"error_kind": "timeout", "error": f"verifier exceeded its time limit of {timeout_s:g}s"}
    elif job.violation is not None:
        kind, detail = job.violation
        outcome = {"error_kind": kind, "error": detail}
    outcome["elapsed_ms"] = elapsed_ms
    output = captured.getvalue()
    if output:
        outcome["output"] = output[-MAX_CAPTURED_OUTPUT:]
    return outcome


def _describe(exc: BaseException) -> str:
    """Exception type, message and the innermost verifier line, for the error text."""
    line = ""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<verifier>":
            line = f" (verifier line {tb.tb_lineno})"
        tb = tb.tb_next
    return f"{type(exc).__name__}: {str(exc)[:500]}{line}"


def _drop_privileges() -> None:
    """Under root, become `nobody`: the audit hook is Python-level and escapable, file
    permissions are not. The parent makes the database copies readable for that user."""
    if os.geteuid() != 0:
        return
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    except PermissionError:
        # root without capabilities: bubblewrap without a user namespace (--cap-drop ALL) already
        # confines this process with read-only mounts.
        pass


_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _load_prctl():
    """libc's prctl, loaded before the drop to `nobody` (the standard library may be unreadable after)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]  # not left lying around for verifier code
    return prctl


def _harden_zygote(prctl) -> None:
    """Not dumpable: a child (same uid) cannot ptrace this process or open its /proc/<pid>/mem and
    fds. Child subreaper: whatever a child leaves behind is re-parented here, to be killed."""
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError("prctl failed: the verifier worker cannot protect itself from its jobs")


# Time the zygote gives a job beyond its own limit before killing the job's process (the parent waits longer).
JOB_GRACE_S = 1.0
_MAX_REPLY_BYTES = 4 * MAX_RESULT_BYTES + 2 * MAX_CAPTURED_OUTPUT + 65536


def _run_in_child(request: dict, private_fds: list[int]) -> dict:
    """Run one job in a fresh forked process; its outcome comes back through a pipe of its own.

    The reply is length-prefixed and read until complete or until the child has exited: a process the
    verifier forked may hold the pipe's write end open (no end of file), it cannot delay the reply.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        exit_code = 0
        try:
            os.close(read_fd)
            for fd in private_fds:
                os.close(fd)  # the protocol to the parent is the zygote's alone
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
            data = json.dumps(_run_job(request), ensure_ascii=False).encode("utf-8")
            view = memoryview(len(data).to_bytes(8, "big") + data)
            while view:
                view = view[os.write(write_fd, view):]
        except BaseException:  # noqa: BLE001 - the child exits 70 on any failure; the parent reports it
            exit_code = 70
        finally:
            os._exit(exit_code)
    os.close(write_fd)
    timeout_s = float(request["timeout_s"])
    deadline = time.monotonic() + timeout_s + JOB_GRACE_S
    buffer = bytearray()
    expected: int | None = None
    status: int | None = None
    over = None  # "time" or "size"
    stopped: int | None = None  # the signal that stopped a child that made itself traced (ptrace TRACEME)
    try:
        while True:
            if expected is None and len(buffer) >= 8:
                expected = int.from_bytes(buffer[:8], "big")
                if expected > _MAX_REPLY_BYTES:
                    over = "size"
                    break
            if expected is not None and len(buffer) >= 8 + expected:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                over = "time"
                break
            exited = status is not None
            ready, _, _ = select.select([read_fd], [], [], 0 if exited else min(remaining, 0.05))
            if ready:
                chunk = os.read(read_fd, 65536)
                if chunk:
                    buffer += chunk
                    continue
                break  # end of file
            if exited:
                break  # the child is gone and nothing more is buffered
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done and os.WIFSTOPPED(wait_status):  # traced by us (it asked to be) and stopped: end it
                stopped = os.WSTOPSIG(wait_status)
                os.kill(pid, signal.SIGKILL)
            elif done:
                status = wait_status
    finally:
        os.close(read_fd)
    if status is None and stopped is None and not over and expected is not None and len(buffer) >= 8 + expected:
        try:  # the whole reply is in: the process has nothing more to say; `_sweep` reaps it after the reply
            reply = json.loads(bytes(buffer[8:8 + expected]).decode("utf-8"))
        except ValueError:
            reply = None
        if isinstance(reply, dict):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return reply
    if status is None:
        if over or expected is None or len(buffer) < 8 + expected:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        while os.WIFSTOPPED(status):
            stopped = os.WSTOPSIG(status)
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
    if stopped is not None:
        return {"error_kind": "crash", "error": f"verifier process made itself traced (ptrace) and stopped on "
                                                f"signal {stopped}; it was killed"}
    if over == "time":
        return {"error_kind": "timeout",
                "error": f"verifier exceeded its time limit of {timeout_s:g}s (its process was killed)"}
    if over == "size":
        return {"error_kind": "bad_return", "error": f"verifier reply passed {_MAX_REPLY_BYTES} bytes"}
    if expected is not None and len(buffer) >= 8 + expected:
        try:
            return json.loads(bytes(buffer[8:8 + expected]).decode("utf-8"))
        except ValueError:
            pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return {"error_kind": "timeout", "error": f"verifier process ended by signal {sig} (CPU time limit)"}
        return {"error_kind": "crash", "error": f"verifier process crashed with signal {sig}"}
    return {"error_kind": "crash",
            "error": f"verifier process exited with status {os.waitstatus_to_exitcode(status)} without a result"}


def _kill_all(own_pid_namespace: bool) -> None:
    """SIGKILL every process a job left behind: none of them runs another instruction of its own after this."""
    if own_pid_namespace:
        try:
            os.kill(-1, signal.SIGKILL)  # in our own PID namespace: everything but init and us
        except ProcessLookupError:
            pass
        return
    for child in _children():
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _sweep(own_pid_namespace: bool) -> bool:
    """Kill and reap every process a job left behind; True when none is left."""
    for _ in range(100):
        _kill_all(own_pid_namespace)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not (_others() if own_pid_namespace else _children()):
            return True
        time.sleep(0.001)
    return False


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _others() -> list[int]:
    me = os.getpid()
    return [p for p in _pids() if p not in (1, me)]


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me:
            out.append(pid)
    return out


def _enforce_seccomp() -> None:
    """In the sandbox (AWM_SECCOMP=1): the seccomp filter of `awm_rl/isolation/seccomp.py` (loaded by path:
    this worker imports no project package), before anything else; it exits if the filter cannot be applied."""
    if os.environ.get("AWM_SECCOMP") != "1":
        return
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp.py")
    try:
        spec = importlib.util.spec_from_file_location("_awm_seccomp", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module spec for {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError, AttributeError) as exc:
        sys.stderr.write(f"awm verifier worker: cannot load the seccomp filter from {path} ({exc}); "
                         "refusing to run verifiers without it\n")
        sys.stderr.flush()
        os._exit(71)
    module.enforce_in_sandbox()  # applies it or exits


def main() -> None:
    _enforce_seccomp()
    memory_mb = int(sys.argv[1])
    cpu_budget_s = int(sys.argv[2])
    own_pid_namespace = len(sys.argv) > 3 and sys.argv[3] == "own-pid-namespace"
    protocol_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    protocol_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGXCPU, _on_time_up)
    signal.signal(signal.SIGALRM, _on_time_up)
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_budget_s, cpu_budget_s))
    prctl = _load_prctl()
    _drop_privileges()
    _harden_zygote(prctl)
    sys.setrecursionlimit(2000)
    sys.addaudithook(_audit)
    gc.collect()
    gc.freeze()  # forked jobs share these pages; a collection in a job must not touch (copy) them
    protocol_out.write(json.dumps({"ready": True}) + "\n")
    protocol_out.flush()
    private_fds = [protocol_in.fileno(), protocol_out.fileno()]
    for line in protocol_in:
        if not line.strip():
            continue
        request = json.loads(line)
        outcome = _run_in_child(request, private_fds)
        # Killed before the reply leaves (so nothing of this job sees the next job's databases, which the parent
        # copies in once it has the reply), reaped after it (off the caller's time), before the next job is read.
        _kill_all(own_pid_namespace)
        outcome["id"] = request["id"]
        protocol_out.write(json.dumps(outcome, ensure_ascii=False) + "\n")
        protocol_out.flush()
        clean = _sweep(own_pid_namespace)
        if not clean:
            sys.exit(75)  # processes left behind that would not die: the parent starts a fresh worker


if __name__ == "__main__":
    main()
