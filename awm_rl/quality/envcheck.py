"""Execution check of generated environment code, in a throw-away worker process with limits.

`check_env_code(code, initial_db, expected_tools=...)` is what the env_code synthesis stage uses to
accept an attempt (paper: "it imports, starts, answers a health check and lists every tool"). The
code runs in `python -m awm_rl.quality.envcheck_worker` (a fresh interpreter in its own process group, inside
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
ways (`envcheck_worker._module_state_check`): it calls every tool it can fill from the schema examples on a fresh
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

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

# The worker's side is envcheck_worker.py (another process, inside the sandbox).

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
        argv, env = sandboxed_command([sys.executable, "-m", "awm_rl.quality.envcheck_worker", str(work)], writable=writable,
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
