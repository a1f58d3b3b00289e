"""Execution check of generated environment code, in a throw-away worker process with limits.

`check_env_code(code, initial_db, expected_tools=...)` is what the env_code synthesis stage uses to
accept an attempt (paper: "it imports, starts, answers a health check and lists every tool"). The
code runs in `python -m awm_rl.quality.envcheck` (a fresh interpreter in its own process group, inside
bubblewrap where available: no network, its own PID namespace, a read-only system, writable only its
temporary folder and the snapshot folder, a clean environment, uid nobody, a seccomp filter; see
`awm_rl.isolation.sandbox`; `EnvCodeCheck.isolation` and `.seccomp` say which) against a copy of the initial
database, with the network refused, an address-space cap and a deadline; the parent kills the whole group (the
sandbox's PID namespace with it) when the deadline passes. Code that hangs at import, calls `sys.exit`
or `os._exit`, segfaults or allocates without bound yields `ok=False` and a clear `error`; the
temporary folder is always removed.

Module-level mutable state. A host imports a scenario's code once and serves many instances from it,
so state kept in the module (a dict of sessions, a counter, a list, a cache object) rather than in the
instance's database would leak from one instance's episode into another's. The check detects it two
ways (`_module_state_check`): it calls every tool it can fill from the schema examples on a fresh
instance and compares the module's globals before and after (a container, a scalar, an
`itertools.count`, an object of a class the code defines: any change counts), then runs the same calls
on a second fresh instance and compares answers and final databases with the first (timestamps, uuids
and long hex tokens masked). Decision: such environments are **rejected** (`ok=False`, `module_state`
and `error` say which global changed after which call, or which call answered differently), not served
with a fresh module per instance: a module per instance would cost an import (tens of ms and several
MB) per instance and defeat the shared host, and the env_code stage regenerates a rejected attempt
with the reason in its error summary, which is the cheaper fix.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

# The parent's modules (settings, the sandbox, the process wrapper) are imported where the parent uses them: the
# worker runs this file too, and needs none of them (its bounds come in the job, read from the parent's settings).

# Interpreter start plus FastAPI/SQLAlchemy/pydantic imports on a busy 2-core machine.
STARTUP_ALLOWANCE_S = 20.0


class EnvCodeCheck(BaseModel):
    """Outcome of one execution check (stored as stage metadata / in attempt records)."""

    ok: bool
    tools: list[str] = Field(default_factory=list)
    missing_tools: list[str] = Field(default_factory=list, description="expected (spec) tools the app lacks")
    extra_tools: list[str] = Field(default_factory=list, description="tools the app has beyond the spec")
    shadowed_tools: dict[str, str] = Field(
        default_factory=dict, description="tool -> the earlier route that HTTP routing sends its requests to")
    error: str | None = None
    import_ms: float | None = None
    lines_of_code: int = 0
    health_tool: str | None = None
    health_status: int | None = None
    health_text: str | None = None
    exit_code: int | None = None
    probe: dict[str, dict] | None = Field(default=None, description="tool -> awm_rl.quality.probe.ToolReport as a dict")
    solutions: dict[str, dict] | None = Field(
        default=None, description="task_idx -> reference-solution run: calls with status, final database file")
    isolation: str | None = Field(
        default=None, description="OS isolation the check ran under: 'bubblewrap' or 'none: <reason>'")
    scratch: str | None = Field(
        default=None, description="the worker's bounds on scratch space: its tmpfs and its on-disk folders")
    seccomp: str | None = Field(
        default=None, description="seccomp filter of the check's worker: 'seccomp: N syscalls denied ...' or "
                                  "'off: <reason>'")
    module_state: str | None = Field(
        default=None, description="module-level mutable state found (why the environment was rejected)")
    tool_specs: list[dict] = Field(
        default_factory=list, description="the tools as agents see them (name, description, input_schema)")
    accepts_database_url: bool | None = Field(
        default=None, description="the code used DATABASE_PATH as given when it is a sqlite:/// URL (the published "
                                  "pipeline's form); False: it prefixed sqlite:/// itself; None: it made no engine")


def check_env_code(code: str, initial_db: Path, *, expected_tools: list[str] | None = None,
                   timeout_s: float = 30, memory_mb: int = 1024, probe: bool = False,
                   solutions: dict[int, dict] | None = None, snapshot_dir: Path | None = None) -> EnvCodeCheck:
    from awm_resources.settings import scratch_mb
    from awm_rl.isolation.sandbox import isolation_level, scratch_summary, seccomp_level

    result = _check_env_code(code, initial_db, expected_tools=expected_tools, timeout_s=timeout_s,
                             memory_mb=memory_mb, probe=probe, solutions=solutions, snapshot_dir=snapshot_dir)
    result.isolation = isolation_level()
    result.seccomp = seccomp_level()
    result.scratch = f"{scratch_summary('check')}; its folders on disk {scratch_mb('check')} MB in all"
    return result


def _check_env_code(code: str, initial_db: Path, *, expected_tools: list[str] | None, timeout_s: float,
                    memory_mb: int, probe: bool, solutions: dict[int, dict] | None,
                    snapshot_dir: Path | None) -> EnvCodeCheck:
    """Import `code` against a copy of `initial_db` in a limited worker; list tools; call a read tool.

    With `probe`, every tool is also called with grounded and edge inputs (`awm_rl.quality.probe`);
    `solutions` (task_idx -> `ReferenceSolution` as a dict) are run each on a fresh instance, and each final database is
    written to `snapshot_dir` for the verifiers, which run elsewhere (`awm_rl.isolation.verification`).
    """
    from awm_resources.settings import scratch_mb
    from awm_rl.isolation.limits import io_limits, untrusted_env
    from awm_rl.isolation.process import WorkerProcess
    from awm_rl.isolation.sandbox import sandboxed_command, scratch_files_limit

    lines = len(code.splitlines())
    initial_db = Path(initial_db)
    if not initial_db.is_file():
        return EnvCodeCheck(ok=False, lines_of_code=lines, error=f"initial database not found: {initial_db}")
    work = Path(tempfile.mkdtemp(prefix="awm-envcheck-"))
    try:
        (work / "server.py").write_text(code, encoding="utf-8")
        shutil.copyfile(initial_db, work / "initial.db")
        if solutions and snapshot_dir is None:
            raise ValueError("solutions need a snapshot_dir for their final databases")
        writable = [work]
        if snapshot_dir is not None:
            Path(snapshot_dir).mkdir(parents=True, exist_ok=True)
            writable.append(Path(snapshot_dir).resolve())
        disk_limit = scratch_mb("check") * 2**20
        job = {"timeout_s": timeout_s, "memory_mb": memory_mb, "expected_tools": expected_tools, "probe": probe,
               "file_size_limit": disk_limit, "io_limits": io_limits(),
               "solutions": {str(k): v for k, v in (solutions or {}).items()},
               "snapshot_dir": str(Path(snapshot_dir).resolve()) if snapshot_dir else None}
        (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
        # In the sandbox (see awm_rl.isolation.sandbox): no network, its own PID namespace, a read-only
        # system, writable only `work` and the snapshot folder, a clean environment, uid nobody.
        argv, env = sandboxed_command([sys.executable, "-m", "awm_rl.quality.envcheck", str(work)], writable=writable,
                                      env=untrusted_env(PYTHONDONTWRITEBYTECODE="1", HOME=str(work), TMPDIR="/tmp"),
                                      cwd=work, scratch_mb=scratch_mb("check"))
        started = time.monotonic()
        with open(work / "stdout.txt", "wb") as out:
            worker = WorkerProcess(argv, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=out, tail_lines=40)
            try:
                rc, over = _wait_within(worker.proc, timeout_s * (3 if probe or solutions else 1)
                                        + STARTUP_ALLOWANCE_S, writable, disk_limit)
                timed_out = rc is None and over is None
            finally:
                worker.close(wait_s=None)  # the worker and anything it started
        elapsed = time.monotonic() - started
        death = worker.death(wait_s=0)
        result_file = work / "result.json"
        if result_file.is_file():
            data = json.loads(result_file.read_text(encoding="utf-8"))
            data.setdefault("lines_of_code", lines)
            data["exit_code"] = rc
            return EnvCodeCheck(**data)
        if over is not None and over < 0:
            why = (f"the check's worker kept {-over:,} files in its scratch space, over the limit of "
                   f"{scratch_files_limit():,} (AWM_SCRATCH_FILES); it was stopped")
        elif over is not None:
            why = (f"the check's worker wrote {over / 2**20:.0f} MB into its folders, over the limit of "
                   f"{disk_limit / 2**20:.0f} MB (AWM_SCRATCH_MB_CHECK); it was stopped")
        elif timed_out:
            why = f"the check did not finish within {timeout_s + STARTUP_ALLOWANCE_S:.0f}s (killed after {elapsed:.0f}s); " \
                  "the code probably hangs at import or in its health check"
        elif death.signal is not None:
            why = f"the worker was {death.cause()}"
        else:
            why = f"the worker {death.cause()} before reporting (the code may call os._exit, or ran out of memory)"
        stderr = death.stderr(lines=40, chars=2000, sep="\n")
        if stderr:
            why += f"\nworker stderr (tail):\n{stderr}"
        return EnvCodeCheck(ok=False, lines_of_code=lines, error=why, exit_code=rc)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _folder_bytes(folders: list[Path]) -> int:
    total = 0
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    pass
    return total


def _wait_within(proc: subprocess.Popen, timeout_s: float, folders: list[Path], limit: int
                 ) -> tuple[int | None, int | None]:
    """Wait for the worker: (exit status, None); (None, bytes written) when its on-disk folders passed
    `limit` (no quota on disk: watched every 0.1 s, each file also capped by RLIMIT_FSIZE in the worker);
    (None, -files) when it kept more files in its tmpfs than allowed; (None, None) at the deadline."""
    from awm_rl.isolation.sandbox import scratch_files, scratch_files_limit

    until = time.monotonic() + timeout_s
    before = _folder_bytes(folders)  # what was there already (the inputs, earlier snapshots) does not count
    while time.monotonic() < until:
        try:
            return proc.wait(timeout=0.1), None
        except subprocess.TimeoutExpired:
            pass
        used = _folder_bytes(folders) - before
        if used > limit:
            return None, used
        files = scratch_files(proc.pid)
        if files is not None and files > scratch_files_limit():
            return None, -files
    return None, None


# ---------------------------------------------------------------------------------------------
# worker side

def _health_check(host: Any) -> tuple[str | None, int | None, str | None]:
    """Call the GET tool with the fewest required arguments that its examples can fill."""
    from awm_rl.runtime.tools import example_arguments, looks_read_only

    candidates = [t for t in host.tools.values() if t.method == "GET"]
    candidates.sort(key=lambda t: (not looks_read_only(t.name), len(t.input_schema.get("required", [])), t.name))
    for tool in candidates:
        args = example_arguments(tool.input_schema)
        if args is None:
            continue
        iid = host.create_instance()
        try:
            result = host.call_tool(iid, tool.name, args)
        finally:
            host.release(iid)
        return tool.name, result.status, result.text[:500]
    return None, None, None


_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
               functools.partial)
_VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"  # dates, timestamps
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # uuids
    r"|\b[0-9a-fA-F]{16,}\b"  # tokens
    r"|\d{9,}(?:\.\d+)?")  # epoch seconds or milliseconds, codes made from them


def _fingerprint(value: Any, module_name: str) -> str | None:
    """A comparable picture of a module global that generated code could mutate (None: not state)."""
    if isinstance(value, _SKIP_TYPES) or callable(value) and not isinstance(value, itertools.count):
        return None
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return repr(value)
    try:
        if isinstance(value, (dict, list, tuple, set, frozenset, bytearray, collections.deque, itertools.count)):
            return repr(value)[:200_000]
        if kind.__module__ == module_name and hasattr(value, "__dict__"):
            return repr(sorted(vars(value).items(), key=lambda kv: kv[0]))[:200_000]
    except Exception:  # noqa: BLE001 - a repr that fails is not something we can compare
        return None
    return None


def _module_globals(host: Any) -> dict[str, str]:
    module = host.env.module
    out = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        fp = _fingerprint(value, module.__name__)
        if fp is not None:
            out[name] = fp
    return out


def _module_state_check(host: Any, fresh_host: Any = None, max_calls: int = 40) -> str | None:
    """Module-level mutable state (see the module docstring): a global changed by a call, or two fresh
    instances that answer identical calls differently. Returns why, or None.

    Randomness (ids from `random`, the clock) also makes two instances differ; so a divergence counts
    only when the same calls on the first instance of a freshly imported module (`fresh_host()`) answer
    exactly as the first instance did: then what differs is what the first run left in the module."""
    from awm_rl.runtime.db import database_digest
    from awm_rl.runtime.tools import example_arguments

    calls = []
    for tool in sorted(host.tools.values(), key=lambda t: (t.method != "GET", t.name)):
        args = example_arguments(tool.input_schema)
        if args is not None:
            calls.append((tool.name, args))
    calls = calls[:max_calls]
    if not calls:
        return None

    def run(host: Any = host) -> tuple[list[str], str, str | None]:
        iid = host.create_instance()
        answers, changed = [], None
        try:
            for name, args in calls:
                before = _module_globals(host)
                res = host.call_tool(iid, name, args)
                if res.status == 504:  # a handler past its deadline: the instance is recycled, stop here
                    answers.append("timeout")
                    break
                answers.append(_VOLATILE.sub("~", f"{res.status} {res.text}"))
                after = _module_globals(host)
                if changed is None:
                    diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                    if diff:
                        changed = (f"module-level mutable state: global(s) {', '.join(diff[:5])} changed during "
                                   f"the call of {name!r}; state kept in the module is shared by every instance "
                                   "of a host (keep it in the database)")
            digest = _VOLATILE.sub("~", repr(database_digest(host.connection(iid))))
        finally:
            host.release(iid)
        return answers, digest, changed

    first, first_db, changed = run()
    if changed:
        return changed
    second, second_db, changed = run()
    if changed:
        return changed
    if first == second and first_db == second_db:
        return None
    if fresh_host is None:
        return None
    again, again_db, _ = run(fresh_host())
    if again != first or again_db != first_db:
        return None  # the calls are not reproducible even from a fresh module: randomness, not carried state
    for (name, _), a, b in zip(calls, first, second, strict=False):  # a run may stop early
        if a != b:
            return (f"module-level mutable state: identical calls on two fresh instances diverge at {name!r} "
                    f"(first {a[:160]!r}, then {b[:160]!r}), while a freshly imported module answers as the first "
                    "did; something outside the instance's database carries over between instances")
    return ("module-level mutable state: identical calls on two fresh instances left different databases, while a "
            "freshly imported module leaves the first one's; something outside the instance's database carries "
            "over between instances")


def _worker(work: Path) -> int:
    import faulthandler
    import warnings

    faulthandler.enable()  # a segfault prints the Python stack to stderr (reported by the parent)
    job = json.loads((work / "job.json").read_text(encoding="utf-8"))
    code = (work / "server.py").read_text(encoding="utf-8")
    lines = len(code.splitlines())

    def report(**data: Any) -> None:
        data.setdefault("lines_of_code", lines)
        tmp = work / "result.json.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, work / "result.json")

    # Warm the heavy imports before the limits, so the cap measures the generated code only.
    import fastapi  # noqa: F401 - the import is the warm-up
    import sqlalchemy  # noqa: F401 - as above

    from awm_rl.isolation.limits import Watchdog, apply_memory_limit, arm_permanently, rss_bytes
    from awm_rl.runtime import host as host_mod
    from awm_rl.runtime.envcode import EnvLoadError

    memory_mb = int(job["memory_mb"])
    apply_memory_limit(memory_mb)
    if job.get("file_size_limit"):  # no single file beyond the folders' limit (the parent watches the sum)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(job["file_size_limit"]),) * 2)
    host_mod._watchdog = Watchdog(rss_cap_mb=int(rss_bytes() / 2**20) + memory_mb)
    arm_permanently()
    timeout_s = float(job["timeout_s"])
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            host = host_mod.ScenarioHost("check", code, work / "initial.db", source_path=str(work / "server.py"),
                                         call_timeout_s=min(timeout_s, 10.0), import_timeout_s=timeout_s,
                                         **job["io_limits"])
    except EnvLoadError as exc:
        report(ok=False, error=str(exc), import_ms=(time.perf_counter() - t0) * 1000)
        return 0
    except MemoryError:
        report(ok=False, error="environment code ran out of memory while importing (memory cap reached)")
        return 0
    import_ms = (time.perf_counter() - t0) * 1000
    tools = list(host.tools)
    expected = job.get("expected_tools")
    missing = [t for t in expected if t not in host.tools] if expected is not None else []
    extra = [t for t in tools if expected is not None and t not in set(expected)]
    errors = []
    if not tools:
        errors.append("the app exposes no tools (no routes with an operation_id)")
    if missing:
        errors.append(f"{len(missing)} tool(s) of the API spec are missing from the app: {', '.join(missing)}")
    shadowed = {t.name: t.shadowed_by for t in host.tools.values() if t.shadowed_by}
    if shadowed:
        errors.append("unreachable tool(s), an earlier route with the same method and a matching path answers "
                      "their requests: " + ", ".join(f"{k} (shadowed by {v})" for k, v in shadowed.items()))
    health_tool, health_status, health_text = _health_check(host)
    if health_status is not None and health_status >= 500:
        errors.append(f"health check {health_tool!r} failed with HTTP {health_status}: {health_text}")
    result = dict(ok=not errors, tools=tools, missing_tools=missing, extra_tools=extra, shadowed_tools=shadowed,
                  import_ms=import_ms, error="; ".join(errors) or None, health_tool=health_tool,
                  health_status=health_status, health_text=health_text,
                  accepts_database_url=host.env.accepts_database_url, tool_specs=host.list_tools())
    report(**result)  # kept if the state check or the probe below takes the worker down
    if tools:
        host.call_timeout_s = min(host.call_timeout_s, 3.0)  # every fillable tool is called: spinners stop early
        def fresh_host() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return host_mod.ScenarioHost("check_fresh", code, work / "initial.db",
                                             source_path=str(work / "server.py"), call_timeout_s=3.0,
                                             import_timeout_s=timeout_s, **job["io_limits"])

        module_state = _module_state_check(host, fresh_host)
        host.call_timeout_s = min(timeout_s, 10.0)
        if module_state:
            errors.append(module_state)
            result.update(ok=False, error="; ".join(errors), module_state=module_state)
            report(**result)
    if job.get("probe"):
        from awm_rl.quality.probe import probe_host

        facts = _template_facts(host, work)
        result["probe"] = {name: r.to_dict() for name, r in probe_host(host, facts, budget_s=timeout_s).items()}
        report(**result)
    if job.get("solutions"):
        from awm_rl.quality.solutions import run_solutions

        result["solutions"] = run_solutions(host, job["solutions"], Path(job["snapshot_dir"]))
        report(**result)
    return 0


def _template_facts(host: Any, work: Path):
    """Database facts of the environment's effective initial state (after its import-time create_all)."""
    from awm_rl.quality.dbfacts import read_facts
    from awm_rl.runtime.db import write_db_file

    return read_facts(write_db_file(host.template, work / "template.db"))


if __name__ == "__main__":
    from awm_rl.isolation.seccomp import enforce_in_sandbox

    enforce_in_sandbox()  # in the sandbox: the seccomp filter before the generated code is imported, or exit
    sys.exit(_worker(Path(sys.argv[1])))
