"""One child process that runs generated code: an env host's scenario worker, the env check, the verifier worker.

`WorkerProcess` starts it from the sandbox's long-lived spawner thread (`sandbox.spawn`: bubblewrap's
die-with-parent follows the spawning thread) in its own session, keeps the tail of its stderr (and forwards
each line to this process's log when given a `log_prefix`), kills it with its process group, and once it
has ended says why (`Death`): killed here and why, killed by a signal (a segfault named), or its exit status,
with out-of-memory recognised from its stderr. Callers put `Death.cause()` and `Death.stderr()` in their errors.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import IO, Any, Sequence

_LINE_CHARS = 400  # of each stderr line kept


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


@dataclass(frozen=True, slots=True)
class Death:
    """How a worker process ended."""

    status: int | None  # its exit status (a negative one: the signal), None when it has not ended
    signal: int | None  # the signal that ended it (bubblewrap's 128 + N counted), else None
    killed_why: str | None  # why this process killed it, if it did
    stderr_tail: tuple[str, ...]

    @property
    def out_of_memory(self) -> bool:
        return any("MemoryError" in line for line in self.stderr_tail)

    def cause(self) -> str:
        """"killed: <why>", "killed by signal 11 (SIGSEGV: segmentation fault)", "exited with status 3 (out of
        memory)", or "did not end"."""
        if self.killed_why:
            return f"killed: {self.killed_why}"
        if self.signal is not None:
            what = signal_name(self.signal) + (": segmentation fault" if self.signal == signal.SIGSEGV else "")
            return f"killed by signal {self.signal} ({what})"
        if self.status is None:
            return "did not end"
        return f"exited with status {self.status}" + (" (out of memory)" if self.out_of_memory else "")

    def stderr(self, *, lines: int = 3, chars: int = 600, sep: str = " | ") -> str:
        """The last `lines` non-blank lines of its stderr, joined by `sep`, at most the last `chars` characters."""
        kept = [line for line in self.stderr_tail if line.strip()][-lines:]
        return sep.join(kept)[-chars:]


class WorkerProcess:
    """A started child process (see the module docstring); `stdin`/`stdout` are its pipes when asked for."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: Any = None, stdin: Any = subprocess.PIPE,
                 stdout: Any = subprocess.PIPE, text: bool = False, tail_lines: int = 12,
                 log_prefix: str | None = None):
        from awm_rl.isolation.sandbox import spawn

        options: dict[str, Any] = dict(encoding="utf-8", bufsize=1) if text else {}
        self.proc = spawn(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=cwd, text=text,
                          start_new_session=True, **options)
        self.pid = self.proc.pid
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._killed_why: str | None = None
        self._log_prefix = log_prefix
        self._reader = threading.Thread(target=self._read_stderr, name=f"awm-worker-stderr-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def stdin(self) -> IO:
        return self.proc.stdin  # type: ignore[return-value]  # a pipe when asked for (the default)

    @property
    def stdout(self) -> IO:
        return self.proc.stdout  # type: ignore[return-value]  # a pipe when asked for (the default)

    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        for raw in iter(stream.readline, "" if isinstance(stream, io.TextIOBase) else b""):
            line = (raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace")).rstrip("\n")
            self._tail.append(line[:_LINE_CHARS])
            if self._log_prefix is not None:
                sys.stderr.write(f"[{self._log_prefix}] {line}\n")
        if self._log_prefix is not None:
            sys.stderr.flush()

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self, why: str | None = None) -> None:
        """SIGKILL to its process group (in bubblewrap: its PID namespace goes with it); the first `why` is kept."""
        if why and self._killed_why is None:
            self._killed_why = why
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except OSError:
                pass

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Its exit status, None if it is still running after `timeout_s`."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def death(self, wait_s: float = 10.0) -> Death:
        """How it ended (waits up to `wait_s` for it, then up to half a second for its last stderr lines)."""
        from awm_rl.isolation.sandbox import returncode_signal

        status = self.wait(wait_s)
        if status is not None:
            self._reader.join(timeout=0.5)
        return Death(status, returncode_signal(status), self._killed_why, tuple(self._tail))

    def close(self, wait_s: float | None = 5.0) -> None:
        """Kill it and whatever it left in its process group, reap it and close its pipes."""
        self.kill()
        self.wait(wait_s)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
