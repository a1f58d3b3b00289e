"""OpenEnv's session protocol over the catalog (`awm serve --openenv`): any OpenEnv client runs episodes on
catalog environments, each session one instance of this project's pool (no process per session).

The wire protocol is OpenEnv's (the `openenv` package's `EnvClient` / `MCPToolClient` speak it unchanged):
- `GET /ws` (WebSocket; `?session_id=` attaches to a session made over HTTP): JSON messages
  `{"type": "reset", "data": {...}}`, `{"type": "step", "data": action}`, `{"type": "state"}`,
  `{"type": "mcp", "data": json-rpc}`, `{"type": "close"}`; answers `{"type": "observation", "data":
  {"observation", "reward", "done"}}`, `{"type": "state", ...}`, `{"type": "mcp", ...}` or
  `{"type": "error", "data": {"message", "code"}}`.
- `POST /mcp` (JSON-RPC 2.0): `openenv/session/create`, `openenv/session/close`, `tools/list`, `tools/call`
  (each with `session_id`); what OpenEnv's `MCPToolClient` uses for `list_tools()` / `call_tool()`. Also
  `openenv/session/reset` (`session_id` and the reset parameters), so a client without a WebSocket runs whole episodes.
- `GET /health`, `/metadata`, `/schema`, `/tasks` (the catalog's tasks). Stateless `POST /reset|/step` and
  `GET /state` answer 400: an episode lives in a session.

Episodes: `reset(scenario=..., task_idx=..., seed=..., episode_id=...)` picks a trainable catalog task (no
scenario: one drawn with `seed`, else the next in turn) and gives the session a pool instance in its initial
state (the same scenario's instance is reset in place, under a millisecond on the host). A step is
`{"type": "list_tools"}` or `{"type": "call_tool", "tool_name", "arguments"}`. The episode ends with the
pseudo-tool `done` (`{"final_answer": ...}`; listed by no `list_tools`), after `max_steps` calls, or at an
environment failure (reward 0, as in the agent loop); only then is it judged, once, by this project's judge
(its verifiers on the instance's initial and final databases): 1.0 / 0.1 / 0, the verdict in `metadata`.
There is no verify tool, so an agent cannot probe its reward mid-episode. Judging is batched across sessions
that end together (one sandboxed verifier batch).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import sys
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from awm_rl.integrations.catalog import CatalogTasks, IntegrationError, catalog_tasks
from awm_rl.reward.tasks import TaskRecord

END_TOOL = "done"
RESET_PARAMS = ("scenario", "task_idx", "seed", "episode_id")
NOT_A_TOOL = {"verify": "there is no verify tool here: the episode is judged once, when it ends (call 'done')"}


class ProtocolError(ValueError):
    """A request the protocol cannot serve (bad reset parameters, a step before reset, ...): the message says why."""


@dataclass
class Session:
    """One OpenEnv session: its pool instance, the task of the current episode and what happened in it."""

    id: str
    handle: Any = None
    task: TaskRecord | None = None
    episode_id: str | None = None
    step_count: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    reward: float | None = None
    end_tool: str = END_TOOL
    tool_names: frozenset[str] = frozenset()
    attached: bool = False
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _JudgeBatch:
    """Episodes ending together are judged in one `score_episodes` call (one verifier batch), off the event loop."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge
        self.pending: list[tuple[Any, TaskRecord, asyncio.Future]] = []
        self.running = False

    async def score(self, episode: Any, record: TaskRecord) -> Any:
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.pending.append((episode, record, future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        from awm_rl.reward import score_episodes

        try:
            while self.pending:
                await asyncio.sleep(0.005)  # let the sessions ending in the same instant join the batch
                batch, self.pending = self.pending, []
                try:
                    scores = await asyncio.to_thread(score_episodes, [b[0] for b in batch], [b[1] for b in batch],
                                                     self.judge)
                except Exception as exc:  # noqa: BLE001 - every waiting session gets the judge's failure
                    for _, _, future in batch:
                        future.set_exception(exc)
                    continue
                for (_, _, future), score in zip(batch, scores, strict=True):
                    future.set_result(score)
        finally:
            self.running = False


class OpenEnvServer:
    """The sessions, the catalog tasks and the pool behind the app (`app()`)."""

    def __init__(self, pool: Any, tasks: CatalogTasks, judge: Any, *, max_sessions: int = 1024, max_steps: int = 20,
                 idle_s: float = 600.0, name: str = "awm-catalog") -> None:
        if not tasks.tasks:
            raise IntegrationError(f"no trainable task in the catalog {tasks.catalog_path}")
        self.pool, self.tasks, self.judge = pool, tasks, judge
        self.max_sessions, self.max_steps, self.idle_s, self.name = max_sessions, max_steps, idle_s, name
        self.sessions: dict[str, Session] = {}
        self._order = tasks.all_tasks()
        self._next = 0
        self._judging = _JudgeBatch(judge)

    # -- sessions ----------------------------------------------------------------------------------
    def create_session(self) -> Session:
        if len(self.sessions) >= self.max_sessions:
            raise ProtocolError(f"all {self.max_sessions} sessions are in use (awm serve --openenv --max-sessions)")
        session = Session(id=uuid.uuid4().hex)
        self.sessions[session.id] = session
        return session

    async def close_session(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        async with session.lock:
            if session.handle is not None:
                await self.pool.release_async(session.handle)
                session.handle = None
        return True

    def session(self, session_id: Any) -> Session:
        if not session_id:
            raise ProtocolError("this request needs a session_id (openenv/session/create, or a /ws connection)")
        found = self.sessions.get(str(session_id))
        if found is None:
            raise ProtocolError(f"unknown session_id {session_id!r} (closed, idle past {self.idle_s:.0f}s, or never "
                                "created)")
        found.last_used = time.monotonic()
        return found

    async def reap_idle(self) -> list[str]:
        """Close the sessions no WebSocket holds that were not used for `idle_s` (their instances go back)."""
        now = time.monotonic()
        idle = [s.id for s in list(self.sessions.values()) if not s.attached and now - s.last_used > self.idle_s]
        for sid in idle:
            await self.close_session(sid)
        return idle

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, min(30.0, self.idle_s / 2)))
            await self.reap_idle()

    # -- episode -----------------------------------------------------------------------------------
    def _pick(self, params: dict[str, Any]) -> TaskRecord:
        unknown = sorted(set(params) - set(RESET_PARAMS))
        if unknown:
            raise ProtocolError(f"unknown reset parameter(s) {unknown}; accepted: {list(RESET_PARAMS)}")
        scenario, task_idx, seed = params.get("scenario"), params.get("task_idx"), params.get("seed")
        if task_idx is not None and (isinstance(task_idx, bool) or not isinstance(task_idx, int)):
            raise ProtocolError(f"reset: task_idx must be an integer, got {task_idx!r}")
        if scenario is None:
            if task_idx is not None:
                raise ProtocolError("reset: task_idx needs a scenario")
            if seed is not None:
                return random.Random(seed).choice(self._order)
            record = self._order[self._next % len(self._order)]
            self._next += 1
            return record
        if not isinstance(scenario, str):
            raise ProtocolError(f"reset: scenario must be a string, got {scenario!r}")
        try:
            if task_idx is None:
                if scenario not in self.tasks.tasks:
                    raise IntegrationError(f"environment {scenario!r} is not among the catalog environments "
                                           f"{self.tasks.scenarios}")
                records = self.tasks.tasks[scenario]
                return random.Random(seed).choice(records) if seed is not None else records[0]
            return self.tasks.task(scenario, task_idx)
        except IntegrationError as exc:
            raise ProtocolError(f"reset: {exc}") from None

    async def reset(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        record = self._pick(params)
        async with session.lock:
            if session.handle is not None and session.handle.scenario == record.scenario:
                await self.pool.reset_async(session.handle)
            else:
                if session.handle is not None:
                    await self.pool.release_async(session.handle)
                    session.handle = None
                session.handle = await self.pool.acquire_async(record.scenario)
            tools = self.pool.list_tools(session.handle)
            session.tool_names = frozenset(t["name"] for t in tools)
            session.end_tool = END_TOOL if END_TOOL not in session.tool_names else f"awm_{END_TOOL}"
            session.task, session.step_count, session.calls = record, 0, []
            session.done, session.reward = False, None
            session.episode_id = str(params.get("episode_id") or uuid.uuid4().hex)
            return _result({"scenario": record.scenario, "task_idx": record.task_idx, "task": record.task,
                            "num_tools": len(tools), "end_tool": session.end_tool, "max_steps": self.max_steps,
                            "episode_id": session.episode_id, "catalog_digest": self.tasks.catalog_digest})

    async def step(self, session: Session, action: dict[str, Any]) -> dict[str, Any]:
        kind = action.get("type")
        if kind == "list_tools":
            return _result({"tools": self._tools(session)})
        if kind != "call_tool":
            raise ProtocolError(f"unknown action type {kind!r}: a step is list_tools or call_tool")
        name, arguments = action.get("tool_name"), action.get("arguments") or {}
        if not isinstance(name, str) or not name:
            raise ProtocolError("call_tool needs a tool_name")
        if not isinstance(arguments, dict):
            raise ProtocolError(f"call_tool arguments must be an object, got {type(arguments).__name__}")
        async with session.lock:
            self._check_open(session)
            if name == session.end_tool:
                answer = arguments.get("final_answer")
                return await self._finish(session, "final_answer", None if answer is None else str(answer))
            if name not in session.tool_names:
                hint = NOT_A_TOOL.get(name, f"{session.task.scenario!r} has no tool {name!r} "  # type: ignore[union-attr]
                                            "(list_tools lists them)")
                session.step_count += 1
                return _tool_observation(name, None, {"error_type": "tool_not_found", "message": hint})
            result = await self.pool.call_tool_async(session.handle, name, arguments)
            session.step_count += 1
            session.calls.append({"tool": name, "arguments": arguments, "ok": result.ok, "status": result.status,
                                  "text": result.text, "error_kind": result.error_kind})
            error = None
            if result.error_kind == "environment":
                error = {"error_type": "execution_error", "message": result.text}
            elif result.status == 422:
                error = {"error_type": "invalid_args", "message": result.text}
            observation = _tool_observation(name, _content(result.text, result.ok, result.status), error)
            if result.error_kind == "environment":
                return await self._finish(session, "environment_error", None, observation, detail=result.text)
            if session.step_count >= self.max_steps:
                return await self._finish(session, "max_turns", None, observation)
            return observation

    def state(self, session: Session) -> dict[str, Any]:
        task = session.task
        return {"episode_id": session.episode_id, "step_count": session.step_count,
                "scenario": task.scenario if task else None, "task_idx": task.task_idx if task else None,
                "done": session.done, "reward": session.reward}

    def _tools(self, session: Session) -> list[dict[str, Any]]:
        if session.handle is None:
            raise ProtocolError("reset first: the session has no environment yet (reset(scenario=..., task_idx=...))")
        return [{"name": t["name"], "description": t.get("description") or "", "input_schema": t["input_schema"]}
                for t in self.pool.list_tools(session.handle)]

    def _check_open(self, session: Session) -> None:
        if session.handle is None or session.task is None:
            raise ProtocolError("reset first: the session has no episode (reset(scenario=..., task_idx=...))")
        if session.done:
            raise ProtocolError(f"episode {session.episode_id} is over (reward {session.reward}); reset for another")

    async def _finish(self, session: Session, termination: str, final_answer: str | None,
                      last: dict[str, Any] | None = None, detail: str | None = None) -> dict[str, Any]:
        """Snapshot the instance, judge the episode (batched with others ending now), end it."""
        from awm_rl.agent.episode import Episode, Step, ToolOutcome

        task = session.task
        assert task is not None
        initial, final = await self.pool.snapshot_async(session.handle)
        steps = [Step(turn=i, response=f"<tool_call>{json.dumps({'name': c['tool'], 'arguments': c['arguments']})}"
                                       "</tool_call>",
                      format={"ok": True, "action": "call_tool", "tool_name": c["tool"], "arguments": c["arguments"]},
                      tool=ToolOutcome(ok=c["ok"], status=c["status"], text=c["text"], error_kind=c["error_kind"]))
                 for i, c in enumerate(session.calls)]
        episode = Episode(scenario=task.scenario, task_idx=task.task_idx, task=task.task, policy="openenv-client",
                          window=None, max_turns=self.max_steps, steps=steps, termination=termination,
                          termination_detail=detail, final_answer=final_answer, initial_db=str(initial),
                          final_db=str(final))
        score = await self._judging.score(episode, task)
        session.done, session.reward = True, score.reward
        verdict = {"outcome": score.outcome, "reward": score.reward, "reasons": score.reasons,
                   "termination": termination, "steps_taken": session.step_count,
                   "classification": score.judge.classification if score.judge else None,
                   "verifier": score.judge.verifier if score.judge else None}
        observation = last or _tool_observation(session.end_tool, verdict, None)
        observation["done"], observation["reward"] = True, score.reward
        observation["metadata"] = observation["observation"]["metadata"] = verdict
        return observation

    # -- JSON-RPC (POST /mcp and the "mcp" WebSocket message) ------------------------------------------
    async def rpc(self, request: Any, bound: Session | None = None) -> dict[str, Any]:
        rid = request.get("id") if isinstance(request, dict) else None
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            return _rpc_error(rid, -32600, "invalid request: a JSON-RPC 2.0 object with a method")
        params = request.get("params") or {}
        if not isinstance(params, dict):
            return _rpc_error(rid, -32602, "params must be an object")
        method = request["method"]
        try:
            if method == "openenv/session/create":
                session = bound or self.create_session()
                return _rpc_ok(rid, {"session_id": session.id})
            if method == "openenv/session/close":
                target = params.get("session_id")
                if bound is not None and target == bound.id:
                    return _rpc_error(rid, -32600, "cannot close the WebSocket's own session over MCP")
                if target in self.sessions and self.sessions[target].attached:
                    return _rpc_ok(rid, {"session_id": target, "closed": False, "closing": True})
                if not await self.close_session(str(target)):
                    return _rpc_error(rid, -32602, f"unknown session_id {target!r}")
                return _rpc_ok(rid, {"session_id": target, "closed": True})
            session = bound or self.session(params.get("session_id"))
            if method == "openenv/session/reset":  # an episode over HTTP alone (the verifiers environment's route)
                return _rpc_ok(rid, await self.reset(session, {k: v for k, v in params.items() if k != "session_id"}))
            if method == "tools/list":
                return _rpc_ok(rid, {"tools": [{"name": t["name"], "description": t["description"],
                                                "inputSchema": t["input_schema"]} for t in self._tools(session)]})
            if method == "tools/call":
                out = await self.step(session, {"type": "call_tool", "tool_name": params.get("name"),
                                                "arguments": params.get("arguments") or {}})
                obs = out["observation"]
                if obs.get("error"):
                    return _rpc_error(rid, -32000, f"{obs['error']['error_type']}: {obs['error']['message']}")
                result = dict(obs["result"] or {})
                result.update(done=out["done"], reward=out["reward"])
                if out["done"]:
                    result["metadata"] = out["metadata"]
                return _rpc_ok(rid, result)
            return _rpc_error(rid, -32601, f"method not found: {method}")
        except ProtocolError as exc:
            return _rpc_error(rid, -32602, str(exc))

    # -- the ASGI app ------------------------------------------------------------------------------
    def app(self) -> Any:
        @asynccontextmanager
        async def lifespan(_: FastAPI) -> Any:
            reaper = asyncio.get_running_loop().create_task(self._reaper())
            yield
            reaper.cancel()

        app = FastAPI(title=f"{self.name} (OpenEnv protocol)", lifespan=lifespan)
        stateless = {"error": "stateless HTTP reset/step/state is not served: an episode lives in a session",
                     "solution": "connect to /ws (OpenEnv's EnvClient / MCPToolClient do)"}

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {"status": "healthy", "sessions": len(self.sessions)}

        @app.get("/metadata")
        async def metadata() -> dict[str, Any]:
            return {"name": self.name, "description": "Agent World Model catalog environments, one pool instance per "
                    "session; the episode is judged when it ends ('done')", "version": self.tasks.catalog_digest,
                    "scenarios": self.tasks.scenarios}

        @app.get("/schema")
        async def schema() -> dict[str, Any]:
            return {"action": ACTION_SCHEMA, "observation": {"type": "object"},
                    "state": {"type": "object", "properties": {k: {} for k in
                              ("episode_id", "step_count", "scenario", "task_idx", "done", "reward")}}}

        @app.get("/tasks")
        async def tasks() -> dict[str, Any]:
            return {"catalog_digest": self.tasks.catalog_digest,
                    "scenarios": {s: [{"task_idx": r.task_idx, "task": r.task} for r in rs]
                                  for s, rs in self.tasks.tasks.items()}}

        @app.post("/reset")
        @app.post("/step")
        @app.get("/state")
        async def no_stateless() -> JSONResponse:
            return JSONResponse(status_code=400, content=stateless)

        @app.post("/mcp")
        async def mcp(request: Request) -> JSONResponse:
            try:
                body = await request.json()
            except ValueError as exc:
                return JSONResponse(_rpc_error(None, -32700, f"parse error: {exc}"))
            return JSONResponse(await self.rpc(body))

        @app.websocket("/ws")
        async def ws(websocket: WebSocket) -> None:
            await websocket.accept()
            owned, session = False, None
            try:
                wanted = websocket.query_params.get("session_id")
                try:
                    if wanted:
                        session = self.session(wanted)
                        if session.attached:
                            raise ProtocolError(f"session {wanted} already has a WebSocket")
                        session.attached = True
                    else:
                        session, owned = self.create_session(), True
                except ProtocolError as exc:
                    await websocket.send_text(json.dumps(_ws_error(str(exc), "SESSION_ERROR")))
                    return
                while True:
                    raw = await websocket.receive_text()
                    answer = await self._ws_message(session, raw)
                    if answer is None:
                        break
                    await websocket.send_text(json.dumps(answer, default=str))
            except WebSocketDisconnect:
                pass
            finally:
                if session is not None:
                    session.attached = False
                    if owned:
                        await self.close_session(session.id)
                try:
                    await websocket.close()
                except RuntimeError:
                    pass

        return app

    async def _ws_message(self, session: Session, raw: str) -> dict[str, Any] | None:
        """The answer to one WebSocket message; None for `close`."""
        try:
            message = json.loads(raw)
        except json.JSONDecodeError as exc:
            return _ws_error(f"invalid JSON: {exc}", "INVALID_JSON")
        kind = message.get("type") if isinstance(message, dict) else None
        session.last_used = time.monotonic()
        data = message.get("data") if isinstance(message, dict) else None
        try:
            if kind == "reset":
                return {"type": "observation", "data": await self.reset(session, data or {})}
            if kind == "step":
                if not isinstance(data, dict):
                    raise ProtocolError("a step message carries the action object in 'data'")
                return {"type": "observation", "data": await self.step(session, data)}
            if kind == "state":
                return {"type": "state", "data": self.state(session)}
            if kind == "mcp":
                return {"type": "mcp", "data": await self.rpc(data, bound=session)}
            if kind == "close":
                return None
            return _ws_error(f"unknown message type {kind!r} (reset, step, state, mcp, close)", "UNKNOWN_TYPE")
        except ProtocolError as exc:
            return _ws_error(str(exc), "VALIDATION_ERROR")
        except Exception as exc:  # noqa: BLE001 - the pool's or judge's failure goes back to this client only
            return _ws_error(f"{type(exc).__name__}: {exc}", "EXECUTION_ERROR")


ACTION_SCHEMA = {"oneOf": [
    {"type": "object", "properties": {"type": {"const": "list_tools"}}, "required": ["type"]},
    {"type": "object", "properties": {"type": {"const": "call_tool"}, "tool_name": {"type": "string"},
                                      "arguments": {"type": "object"}}, "required": ["type", "tool_name"]}]}


def _result(observation: dict[str, Any], *, reward: float | None = None, done: bool = False) -> dict[str, Any]:
    """OpenEnv's serialized observation: the fields, and reward / done beside them."""
    return {"observation": {**observation, "metadata": {}}, "reward": reward, "done": done}


def _content(text: str, ok: bool, status: int | None) -> dict[str, Any]:
    """A tool answer as MCP content, with the parsed JSON (`data`, what OpenEnv's client returns) beside it."""
    try:
        data: Any = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        data = text
    return {"content": [{"type": "text", "text": text}], "isError": not ok, "status": status, "data": data}


def _tool_observation(name: str, result: Any, error: dict[str, str] | None) -> dict[str, Any]:
    return _result({"tool_name": name, "result": result, "error": error})


def _ws_error(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}


def _rpc_ok(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _rpc_error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def main(argv: list[str]) -> int:
    """`awm serve --openenv`: the catalog over OpenEnv's protocol until interrupted."""
    import argparse

    p = argparse.ArgumentParser(prog="awm serve --openenv", description="Serve the catalog's environments over "
                                "OpenEnv's protocol (WebSocket /ws, JSON-RPC /mcp); every session is a pool instance.")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--home", type=Path, default=None, help="artifact store root (default $AWM_HOME)")
    p.add_argument("--catalog-version", default=None, help="a kept catalog version (digest) instead of catalog.json")
    p.add_argument("--scenarios", nargs="*", default=None, help="only these catalog environments")
    p.add_argument("--judge", choices=("code", "llm", "sql"), default="code",
                   help="how an ended episode is judged (default code: the verifiers alone, no LLM)")
    p.add_argument("--judge-model", default=None, help="litellm model of an llm/sql judge (default $AWM_JUDGE_MODEL)")
    p.add_argument("--max-sessions", type=int, default=1024, help="sessions open at once (default 1024)")
    p.add_argument("--max-steps", type=int, default=20, help="tool calls per episode before it ends (default 20)")
    p.add_argument("--call-timeout", type=float, default=10.0, help="seconds per tool call (default 10)")
    p.add_argument("--idle-timeout", type=float, default=600.0,
                   help="seconds before a session no WebSocket holds and nobody used is closed (default 600)")
    args = p.parse_args(argv)
    if args.max_sessions < 1 or args.max_steps < 1:
        print("awm serve --openenv: --max-sessions and --max-steps must be at least 1", file=sys.stderr)
        return 2

    import uvicorn

    from awm_rl.reward.judge import Judge
    from awm_rl.runtime.pool import EnvironmentPool

    try:
        tasks = catalog_tasks(args.home, catalog_version=args.catalog_version, scenarios=args.scenarios,
                              judge_mode=args.judge)
        if not tasks.tasks:
            raise IntegrationError(f"no trainable task in {tasks.catalog_path} (awm catalog --refresh)")
    except (IntegrationError, FileNotFoundError) as exc:
        print(f"awm serve --openenv: {exc}", file=sys.stderr)
        return 2
    judge_llm = None
    if args.judge != "code":
        from awm_resources.llm import judge_client
        from awm_resources.settings import judge_llm_config

        judge_llm = judge_client(judge_llm_config(model=args.judge_model))
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # protocol given: no Nagle delay
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        print(f"awm serve --openenv: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    sock.listen(1024)
    pool = EnvironmentPool(tasks.store.root, call_timeout_s=args.call_timeout, max_instances=args.max_sessions + 64)
    try:
        server = OpenEnvServer(pool, tasks, Judge(args.judge, llm=judge_llm), max_sessions=args.max_sessions,
                               max_steps=args.max_steps, idle_s=args.idle_timeout)
        port = sock.getsockname()[1]
        print(f"awm serve --openenv: {len(tasks.scenarios)} environment(s), {len(tasks.all_tasks())} task(s) of "
              f"catalog {tasks.catalog_digest[:12]} at ws://{args.host}:{port}/ws (judge {args.judge}; "
              f"isolation: {pool.isolation()})", flush=True)
        config = uvicorn.Config(server.app(), log_level="warning", ws_max_size=16 * 1024 * 1024)
        try:
            asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
        except KeyboardInterrupt:
            pass
    finally:
        pool.close()
    return 0
