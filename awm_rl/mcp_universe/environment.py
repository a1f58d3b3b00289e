"""MCP-Universe's MCP servers as an environment of our agent loop, through its own package in its own venv.

`Worker` runs `mcpu_worker.py` under the `mcpuniverse` venv's Python (one long-lived process: the task's MCP
servers are stdio children of it and live across the episode's calls) and sends it one JSON line per request.
`MCPUniverseEnvironment` is the loop's pool: `acquire(task_id)` starts the task's servers with MCP-Universe's
`MCPManager` and lists their tools; `call_tool` runs one call on the server that has the tool; `release` stops
them. There are no databases to snapshot: MCP-Universe scores the agent's answer with its own evaluators.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_rl.bfcl.environment import ToolResult

WORKER = Path(__file__).with_name("mcpu_worker.py")


class MCPUniverseUnavailable(RuntimeError):
    """MCP-Universe's environment is missing or failed, or a task cannot run: the message says which and why."""


def mcpu_python() -> Path:
    """The interpreter of the `mcpuniverse` venv: .venv/mcpuniverse beside this interpreter's venv."""
    return Path(sys.prefix) / "mcpuniverse" / "bin" / "python"


class Worker:
    """One `mcpu_worker.py` process; requests are answered one at a time, in order."""

    def __init__(self, python: Path | None = None, *, timeout_s: float = 120.0) -> None:
        self.python = Path(python) if python else mcpu_python()
        if not self.python.is_file():
            raise MCPUniverseUnavailable(f"MCP-Universe's environment is missing ({self.python}): run "
                                         "`make mcp-universe-venv` (part of `make install`) or pass --mcpu-python")
        self.timeout_s = timeout_s
        # the venv's bin first: MCP-Universe starts its Python servers as `python3 -m ...`
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}"
        self._stderr = tempfile.TemporaryFile(mode="a+")  # appended to (O_APPEND): its tail goes into errors
        # -I: this package's own modules stay off the worker's sys.path.
        self.proc = subprocess.Popen([str(self.python), "-I", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
                                     start_new_session=True)
        self._lock = threading.Lock()
        ready = self._read()
        self.version = ready.get("mcpuniverse_version")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        holder: list[str] = []
        reader = threading.Thread(target=lambda: holder.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self.timeout_s)
        if not holder or not holder[0]:
            code = self.proc.poll()
            self.close()
            raise MCPUniverseUnavailable(f"MCP-Universe's worker ({self.python}) gave no answer within "
                                         f"{self.timeout_s:.0f}s" + (f" (it exited with {code})" if code is not None else "")
                                         + f"; its log ends: {self.log_tail()}")
        return json.loads(holder[0])

    def log_tail(self, chars: int = 1500) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-chars:]
        except ValueError:  # closed
            return ""

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            if self.proc.poll() is not None:
                raise MCPUniverseUnavailable(f"MCP-Universe's worker has exited ({self.proc.returncode}); its log ends: {self.log_tail()}")
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.proc.stdin.flush()
            answer = self._read()
        if "error" in answer:
            raise MCPUniverseUnavailable(f"MCP-Universe {op}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except Exception:  # noqa: BLE001 - a worker that does not end is killed
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


@dataclass
class Session:
    """One task's episode: its servers' tools and which server has each."""

    task_id: str
    id: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    server_of: dict[str, str] = field(default_factory=dict)


class MCPUniverseEnvironment:
    """The loop's environments over prepared MCP-Universe tasks (acquire by task id)."""

    def __init__(self, worker: Worker, servers_of: dict[str, list[str]]) -> None:
        self.worker = worker
        self.servers_of = servers_of

    def acquire(self, scenario: str) -> Session:
        if scenario not in self.servers_of:
            raise KeyError(f"no MCP-Universe task {scenario!r} in this run")
        session = Session(task_id=scenario, id=uuid.uuid4().hex)
        tools = self.worker.request("open", session=session.id, servers=self.servers_of[scenario])["tools"]
        for tool in tools:
            if tool["name"] in session.server_of:  # two servers with one tool name: MCP-Universe's agents see both
                raise MCPUniverseUnavailable(f"task {scenario!r}: servers {session.server_of[tool['name']]!r} and "
                                             f"{tool['server']!r} both have a tool {tool['name']!r}")
            session.server_of[tool["name"]] = tool["server"]
        session.tools = [{"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
                         for t in tools]
        return session

    def list_tools(self, handle: Session) -> list[dict[str, Any]]:
        return handle.tools

    def call_tool(self, handle: Session, name: str, arguments: dict[str, Any]) -> ToolResult:
        server = handle.server_of.get(name)
        if server is None:
            return ToolResult(ok=False, status=404, text=f"no tool {name!r} (list_tools lists them)", error_kind="agent")
        try:
            answer = self.worker.request("call", session=handle.id, server=server, tool=name, arguments=arguments)
        except MCPUniverseUnavailable as exc:
            return ToolResult(ok=False, status=None, text=str(exc), error_kind="environment")
        if not answer["ok"]:  # the server's own error result (bad arguments, a failed action): the agent's to handle
            return ToolResult(ok=False, status=400, text=answer["text"], error_kind="agent")
        return ToolResult(ok=True, status=200, text=answer["text"])

    def reset(self, handle: Session) -> None:
        raise NotImplementedError("MCP-Universe sessions are not reset; open a new one")

    def snapshot(self, handle: Session) -> None:  # noqa: ARG002 - the ToolEnvironments interface
        return None  # MCP-Universe scores the answer, not a database

    def release(self, handle: Session) -> None:
        self.worker.request("close", session=handle.id)
