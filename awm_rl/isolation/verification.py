"""Run untrusted task verifiers in a sandboxed worker process and capture every failure.

A verifier is generated code: `verify_task(initial_db_path, final_db_path) -> dict` (sql mode,
evidence for the judge) or `verify_task_completion(initial_db_path, final_db_path,
final_answer=None) -> {"result": "complete" | "others"}` (code mode). It runs in a fresh
interpreter (`awm_rl/isolation/verifier_worker.py`, stdlib only, clean environment) inside bubblewrap
(`awm_rl.isolation.sandbox`: no network, own PID namespace, read-only system and worker code, nothing
writable, uid nobody, a seccomp filter; Python-level guards only when bubblewrap is unavailable, see
`isolation_level()`), with RLIMIT_CPU, RLIMIT_AS and RLIMIT_FSIZE=0, a wall-clock timeout enforced
from here, an import allow-list, an audit hook refusing writes, processes, network and other
databases, on private read-only copies of the two databases made for each verifier. Errors come
back as a `VerifierOutcome`, never raised.

`run_verifiers` amortises the interpreter start: its sandboxed workers stay warm in this process between
calls (`WARM`, per time and memory limit), and each forks a fresh process for every verifier (about a
millisecond), so nothing a verifier does to its process (patching the worker, switching a guard off,
leaving a process behind) reaches the next verifier's verdict; a worker that hangs, dies or misbehaves is
replaced. While a verifier runs, the one folder its sandbox can read holds that verdict's two private,
read-only database copies and nothing else (the cached pristine copies live in a folder it cannot see), so a
verdict on a fresh episode costs a fork and two file copies, not a sandbox start (`awm bench serve`:
`verification`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from awm_resources.documents import verifier_functions as verifier_functions  # one owner; callers import it here
from awm_resources.settings import scratch_mb
from awm_rl.isolation.process import WorkerProcess
from awm_rl.isolation.sandbox import isolation_level, sandbox_available, sandboxed_command, seccomp_level

# The import allow-list lives in the worker script (ALLOWED_IMPORTS there): it runs stdlib-only.
WORKER_SCRIPT = Path(__file__).with_name("verifier_worker.py")
VerifierFunction = Literal["verify_task_completion", "verify_task"]
ErrorKind = Literal[
    "timeout", "memory", "crash", "bad_return", "forbidden_import", "forbidden_operation",
    "missing_function", "syntax_error", "missing_database", "sandbox_error",
]
# Error kinds after which a worker is replaced rather than reused.
_TAINTING = {"timeout", "memory", "forbidden_operation", "sandbox_error"}
_START_TIMEOUT_S = 20.0
PRISTINE_KEPT = 16  # database snapshots a sandbox keeps for later jobs (outside the sandbox's view)
_GRACE_S = 3.0  # beyond the worker's own per-job kill (timeout + 1 s there)


class VerifierJob(BaseModel):
    """One verifier to run against one (initial, final) database pair."""

    code: str
    initial_db: Path
    final_db: Path
    function: VerifierFunction = "verify_task_completion"
    final_answer: str | None = None


class VerifierOutcome(BaseModel):
    """What a verifier run produced. `ok` means it returned a usable dict.

    `verdict` is set in code mode only ("complete" or "others"); `result` holds the returned
    dict (sql mode: the evidence for the judge). On failure `error_kind` says which limit or
    rule was hit and `error` says what happened, naming the verifier line where known.
    """

    ok: bool
    function: VerifierFunction
    result: dict | None = None
    verdict: Literal["complete", "others"] | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    elapsed_ms: float = 0.0
    output: str | None = Field(default=None, description="what the verifier printed (tail)")
    isolation: str | None = Field(default=None, description="OS isolation the verifier ran under")
    seccomp: str | None = Field(default=None, description="seccomp filter of the verifier's worker, or 'off: <reason>'")


def run_verifier(
    code: str,
    initial_db: Path,
    final_db: Path,
    *,
    function: VerifierFunction = "verify_task_completion",
    final_answer: str | None = None,
    timeout_s: float = 10,
    memory_mb: int = 512,
) -> VerifierOutcome:
    """Run one verifier in a fresh sandboxed interpreter."""
    job = VerifierJob(
        code=code, initial_db=initial_db, final_db=final_db, function=function, final_answer=final_answer
    )
    return run_verifiers([job], timeout_s=timeout_s, memory_mb=memory_mb)[0]


def run_verifiers(
    jobs: list[VerifierJob],
    *,
    timeout_s: float = 10,
    memory_mb: int = 512,
    workers: int = 1,
) -> list[VerifierOutcome]:
    """Run many verifiers, `workers` sandboxed interpreters each taking a share in sequence.

    Outcomes come back in the order of `jobs`.
    """
    if not jobs:
        return []
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        with WARM.sandbox(timeout_s=timeout_s, memory_mb=memory_mb) as sandbox:
            return [sandbox.run(job) for job in jobs]
    chunks = [list(range(i, len(jobs), workers)) for i in range(workers)]
    outcomes: list[VerifierOutcome | None] = [None] * len(jobs)

    def run_chunk(indices: list[int]) -> None:
        with WARM.sandbox(timeout_s=timeout_s, memory_mb=memory_mb) as sandbox:
            for index in indices:
                outcomes[index] = sandbox.run(jobs[index])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run_chunk, chunks))
    return [outcome for outcome in outcomes if outcome is not None]


class WarmSandboxes:
    """Verifier sandboxes kept started between `run_verifiers` calls, per (time limit, memory limit, scratch size).

    A sandbox is lent to one caller at a time (`sandbox()`), so concurrent callers get one each; at most
    `keep` idle ones per limit pair stay, the rest are closed. A process that forked (a child inherits the
    parent's pipes, not its workers) starts over with none. All are closed at exit.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._idle: dict[tuple[float, int, int], list[VerifierSandbox]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.started = 0  # sandboxes created (a worker start each, unless it was never used)

    def _take(self, key: tuple[float, int, int]) -> VerifierSandbox | None:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(key) or []
            return idle.pop() if idle else None

    def _give(self, key: tuple[float, int, int], sandbox: VerifierSandbox) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, []) if self._pid == os.getpid() else None
            if idle is not None and len(idle) < self.keep:
                idle.append(sandbox)
                return
        sandbox.close()

    def sandbox(self, *, timeout_s: float = 10, memory_mb: int = 512) -> _Lent:
        """A warm sandbox for these limits (a new one when none is idle), returned when the block ends."""
        key = (float(timeout_s), int(memory_mb), scratch_mb("verifier"))  # what a worker is started with
        found = self._take(key)
        if found is None:
            found = VerifierSandbox(timeout_s=timeout_s, memory_mb=memory_mb)
            with self._lock:
                self.started += 1
        return _Lent(self, key, found)

    def close(self) -> None:
        """Close every idle sandbox (lent ones are closed when they come back)."""
        with self._lock:
            idle = [box for boxes in self._idle.values() for box in boxes] if self._pid == os.getpid() else []
            self._idle = {}
        for box in idle:
            box.close()


class _Lent:
    """A sandbox lent by `WarmSandboxes`: the context manager gives it back (or closes it)."""

    def __init__(self, owner: WarmSandboxes, key: tuple[float, int, int], box: VerifierSandbox) -> None:
        self.owner, self.key, self.box = owner, key, box

    def __enter__(self) -> VerifierSandbox:
        return self.box

    def __exit__(self, *exc: object) -> None:
        self.owner._give(self.key, self.box)


class VerifierSandbox:
    """One sandboxed worker interpreter plus a folder for the current job's database copies.

    Use as a context manager; `run(job)` is sequential (one job at a time per sandbox). The worker can read
    `_scratch` only, which holds the current job's two copies and nothing else between jobs; the pristine
    copies (consistent snapshots made once per database version) are kept in `_cache`, outside its view.
    """

    def __init__(self, *, timeout_s: float = 10, memory_mb: int = 512) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if memory_mb < 64:
            raise ValueError(f"memory_mb must be at least 64 (the interpreter needs ~20 MB), got {memory_mb}")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self._worker: WorkerProcess | None = None
        self._scratch = Path(tempfile.mkdtemp(prefix="awm-verify-"))
        self._scratch.chmod(0o711)  # a worker that dropped to `nobody` may open files by name only
        self._cache = Path(tempfile.mkdtemp(prefix="awm-verify-cache-"))  # never mounted in the sandbox
        self._pristine: OrderedDict[tuple[str, int, int], Path] = OrderedDict()
        self._counter = 0
        self._copy_seq = 0
        self._pristine_seq = 0
        self.workers_started = 0
        self.isolation = isolation_level()
        self.seccomp = seccomp_level()

    def __enter__(self) -> VerifierSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker and delete the database copies."""
        self._stop_worker()
        shutil.rmtree(self._scratch, ignore_errors=True)
        shutil.rmtree(self._cache, ignore_errors=True)

    # ----------------------------------------------------------------------------- running

    def run(self, job: VerifierJob) -> VerifierOutcome:
        """Run one verifier; every failure becomes an outcome, never an exception."""
        start = time.perf_counter()
        try:
            initial_copy, final_copy = self._copies(job)
        except (OSError, sqlite3.Error, FileNotFoundError) as exc:
            return VerifierOutcome(
                ok=False, function=job.function, error_kind="missing_database",
                error=f"cannot copy the databases for the verifier: {exc}",
            )
        try:
            reply = self._exchange(job, initial_copy, final_copy)
        finally:
            for path in (initial_copy, final_copy):
                path.unlink(missing_ok=True)
        if "elapsed_ms" not in reply:
            reply["elapsed_ms"] = (time.perf_counter() - start) * 1000.0
        if reply.get("error_kind") in _TAINTING:
            self._stop_worker()
        outcome = _to_outcome(job.function, reply)
        outcome.isolation = self.isolation
        outcome.seccomp = self.seccomp
        return outcome

    def _exchange(self, job: VerifierJob, initial_copy: Path, final_copy: Path) -> dict:
        try:
            proc = self._ensure_worker()
        except RuntimeError as exc:
            return {"error_kind": "sandbox_error", "error": str(exc)}
        self._counter += 1
        request = {
            "id": self._counter,
            "code": job.code,
            "function": job.function,
            "initial": str(initial_copy),
            "final": str(final_copy),
            "final_answer": job.final_answer,
            "timeout_s": self.timeout_s,
        }
        started = time.perf_counter()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            return self._worker_died(f"worker stopped accepting jobs: {exc}")
        line = self._read_line(proc, self.timeout_s + _GRACE_S)
        if line is None:
            if proc.running():
                self._stop_worker()
                return {
                    "error_kind": "timeout",
                    "error": f"verifier exceeded its time limit of {self.timeout_s:g}s (worker killed)",
                    "elapsed_ms": (time.perf_counter() - started) * 1000.0,
                }
            return self._worker_died("worker exited while running the verifier")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self._stop_worker()
            return {"error_kind": "sandbox_error", "error": f"worker sent an unreadable reply: {line[:200]!r}"}
        if reply.get("id") != self._counter:
            self._stop_worker()
            return {"error_kind": "sandbox_error", "error": "worker reply does not match the job"}
        return reply

    def _worker_died(self, what: str) -> dict:
        worker, self._worker = self._worker, None
        if worker is None:
            return {"error_kind": "crash", "error": f"{what} (no worker)"}
        death = worker.death(wait_s=5)
        if death.signal in (signal.SIGXCPU, signal.SIGKILL):
            return {"error_kind": "timeout", "error": f"{what}: CPU time limit reached (signal {death.signal})"}
        stderr = death.stderr(lines=40, chars=800, sep="\n")
        return {"error_kind": "memory" if death.out_of_memory else "crash",
                "error": f"{what} (exit code {death.status}); stderr: {stderr or '(empty)'}"}

    # ----------------------------------------------------------------------------- worker

    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is not None and self._worker.running():
            return self._worker
        self._worker = None
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
               "HOME": "/tmp"}
        cpu_budget = 1_000_000  # the per-job soft limit (in each job's process) is what counts
        argv = [sys.executable, "-I", "-S", str(WORKER_SCRIPT), str(self.memory_mb), str(cpu_budget)]
        if sandbox_available():
            argv.append("own-pid-namespace")
        # The scratch folder (database copies) is read-only inside; the worker's code is too.
        argv, env = sandboxed_command(argv, readable=[self._scratch, WORKER_SCRIPT.parent], env=env,
                                      cwd=self._scratch, scratch_mb=scratch_mb("verifier"))
        worker = WorkerProcess(argv, env=env, cwd=self._scratch, text=True, tail_lines=40)
        self.workers_started += 1
        line = self._read_line(worker, _START_TIMEOUT_S)
        if line is None or '"ready"' not in line:
            worker.close()
            stderr = worker.death(wait_s=0).stderr(lines=40, chars=800, sep="\n")
            raise RuntimeError(f"verifier worker did not start ({WORKER_SCRIPT}): {stderr or line!r}")
        self._worker = worker
        return worker

    @staticmethod
    def _read_line(proc: WorkerProcess, timeout_s: float) -> str | None:
        """One protocol line, or None on timeout or end of stream."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([proc.stdout], [], [], remaining)
            if ready:
                line = proc.stdout.readline()
                return line or None

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    # ----------------------------------------------------------------------------- databases

    def _copies(self, job: VerifierJob) -> tuple[Path, Path]:
        """Fresh read-only copies of both databases for this job (from cached pristine copies)."""
        self._copy_seq += 1
        seq = self._copy_seq
        out: list[Path] = []
        try:
            for role, source in (("initial", job.initial_db), ("final", job.final_db)):
                pristine = self._pristine_copy(Path(source))
                target = self._scratch / f"job{seq}_{role}.db"
                out.append(target)
                shutil.copyfile(pristine, target)
                target.chmod(0o444)
        except BaseException:
            for path in out:  # the folder the sandbox sees holds nothing between jobs
                path.unlink(missing_ok=True)
            raise
        return out[0], out[1]

    def _pristine_copy(self, source: Path) -> Path:
        """A consistent single-file snapshot of `source` (WAL folded in), made once per version; the last
        `PRISTINE_KEPT` are kept (an episode's final database is seen once, its scenario's initial one often)."""
        stat = source.stat()  # FileNotFoundError names the missing path
        key = (str(source.resolve()), stat.st_mtime_ns, stat.st_size)
        cached = self._pristine.get(key)
        if cached is not None and cached.exists():
            self._pristine.move_to_end(key)
            return cached
        while len(self._pristine) >= PRISTINE_KEPT:
            self._pristine.popitem(last=False)[1].unlink(missing_ok=True)
        self._pristine_seq += 1
        target = self._cache / f"pristine{self._pristine_seq}.db"
        target.unlink(missing_ok=True)
        # Through memory and one plain write: a backup straight into a file syncs it to disk page by page
        # (tens of ms on a busy disk) for a copy that lives a few jobs. A memory database is never in WAL mode.
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            memory = sqlite3.connect(":memory:")
            try:
                src.backup(memory)
                image = memory.serialize()
            finally:
                memory.close()
        finally:
            src.close()
        target.write_bytes(image)
        self._pristine[key] = target
        return target


def _to_outcome(function: VerifierFunction, reply: dict) -> VerifierOutcome:
    elapsed = float(reply.get("elapsed_ms", 0.0))
    output = reply.get("output")
    if reply.get("error_kind"):
        return VerifierOutcome(
            ok=False, function=function, error_kind=reply["error_kind"], error=reply.get("error"),
            elapsed_ms=elapsed, output=output,
        )
    result = json.loads(reply["result_json"])
    verdict: Literal["complete", "others"] | None = None
    if function == "verify_task_completion":
        raw = result.get("result")
        normalised = raw.strip().lower() if isinstance(raw, str) else None
        if normalised not in ("complete", "others"):
            return VerifierOutcome(
                ok=False, function=function, result=result, error_kind="bad_return",
                error=f"verify_task_completion must return {{'result': 'complete'|'others'}}, got result={raw!r}",
                elapsed_ms=elapsed, output=output,
            )
        verdict = "complete" if normalised == "complete" else "others"
    return VerifierOutcome(
        ok=True, function=function, result=result, verdict=verdict, elapsed_ms=elapsed, output=output
    )


WARM = WarmSandboxes()  # the process's warm verifier sandboxes (`run_verifiers`)
atexit.register(WARM.close)
