"""The Agent World Model catalog as a verifiers environment (verifiers 0.3.1, its classic `MultiTurnEnv` API).

`load_environment(catalog_url=...)` talks to `awm serve --openenv` over plain HTTP (`GET /tasks`, JSON-RPC
`POST /mcp`) and imports nothing of the project, so it runs in a venv of its own (`make verifiers-venv`):
- the dataset is the catalog's trainable tasks, as the server lists them (`scenarios=`, `tasks_per_env=`);
- the tools are each environment's own listing (names, descriptions, JSON schemas), offered as native tools;
- every rollout is its own server session, so its own pool instance, reset to the task's initial database;
- the reward is what the server's judge gives when the episode ends (the task's verifier on the instance's initial
  and final databases: 1.0 / 0.1 / 0): the episode ends when the model answers without a tool call (that answer is
  the final answer), or after the server's `--max-steps` calls. No tool lets the model see or probe its reward.

    vf-eval awm-catalog -a '{"catalog_url": "http://127.0.0.1:8000", "scenarios": ["issue_tracker"]}' \
        -m MODEL -b http://127.0.0.1:8001/v1 -k OPENAI_API_KEY -n 10 -r 4 --disable-env-server
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import verifiers as vf
from datasets import Dataset

SYSTEM_PROMPT = ("You operate a web application through its tools. Complete the user's task with tool calls, then "
                 "reply without a tool call: that reply is your final answer, and it ends the episode.")


class CatalogError(RuntimeError):
    """The catalog server refused or failed a request: the message is the server's."""


def _rpc_sync(client: httpx.Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    reply.raise_for_status()
    body = reply.json()
    if "error" in body:
        raise CatalogError(f"{method}: {body['error']['message']}")
    return body["result"]


def catalog_rows(catalog_url: str, scenarios: list[str] | None = None, tasks_per_env: int | None = None,
                 timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """One row per catalog task: the task as the question, and in `info` its scenario, index and tool listing."""
    with httpx.Client(base_url=catalog_url, timeout=timeout_s) as client:
        reply = client.get("/tasks")
        reply.raise_for_status()
        listing = reply.json()
        served = listing["scenarios"]
        missing = sorted(set(scenarios or []) - set(served))
        if missing:
            raise CatalogError(f"environment(s) {missing} not served by {catalog_url} (it serves {sorted(served)})")
        rows = []
        for scenario in scenarios or sorted(served):
            tasks = served[scenario][:tasks_per_env] if tasks_per_env else served[scenario]
            session = _rpc_sync(client, "openenv/session/create", {})["session_id"]
            try:
                _rpc_sync(client, "openenv/session/reset", {"session_id": session, "scenario": scenario,
                                                            "task_idx": tasks[0]["task_idx"]})
                tools = _rpc_sync(client, "tools/list", {"session_id": session})["tools"]
            finally:
                _rpc_sync(client, "openenv/session/close", {"session_id": session})
            tool_defs = [{"name": t["name"], "description": t.get("description") or t["name"],
                          "parameters": t.get("inputSchema") or {"type": "object", "properties": {}}} for t in tools]
            for task in tasks:
                info = {"scenario": scenario, "task_idx": task["task_idx"], "catalog_digest": listing["catalog_digest"],
                        "tool_defs": tool_defs}
                rows.append({"question": task["task"], "answer": "", "info": json.dumps(info)})
    return rows


class CatalogEnv(vf.MultiTurnEnv):
    """Each rollout one `awm serve --openenv` session; tool calls go to its pool instance; judged at the end."""

    def __init__(self, catalog_url: str, request_timeout_s: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.catalog_url = catalog_url.rstrip("/")
        self.request_timeout_s = request_timeout_s
        self._clients: dict[int, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        loop = id(asyncio.get_running_loop())  # one connection pool per event loop (vf-eval may run several)
        if loop not in self._clients:
            self._clients[loop] = httpx.AsyncClient(base_url=self.catalog_url, timeout=self.request_timeout_s)
        return self._clients[loop]

    async def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        reply = await self._client().post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        reply.raise_for_status()
        body = reply.json()
        if "error" in body:
            raise CatalogError(f"{method}: {body['error']['message']}")
        return body["result"]

    async def setup_state(self, state: vf.State) -> vf.State:
        info = state["info"]
        session = (await self._rpc("openenv/session/create", {}))["session_id"]
        state["awm_session"] = session
        first = await self._rpc("openenv/session/reset", {"session_id": session, "scenario": info["scenario"],
                                                          "task_idx": info["task_idx"]})
        state["awm_end_tool"] = first["observation"]["end_tool"]
        state["awm_episode_id"] = first["observation"]["episode_id"]
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:  # noqa: ARG002 - the base signature
        last = messages[-1]
        answers: list[Any] = []
        for call in last.tool_calls or []:
            try:
                arguments = json.loads(call.arguments or "{}")
                if not isinstance(arguments, dict):
                    raise ValueError(f"tool arguments must be a JSON object, got {type(arguments).__name__}")
            except ValueError as exc:
                answers.append(vf.ToolMessage(role="tool", content=f"invalid arguments: {exc}", tool_call_id=call.id))
                continue
            if state.get("awm_reward") is not None:
                content = "the episode is over"
            else:
                try:
                    result = await self._rpc("tools/call", {"session_id": state["awm_session"], "name": call.name,
                                                            "arguments": arguments})
                    content = "\n".join(c.get("text", "") for c in result.get("content") or []) or json.dumps(result)
                    if result.get("done"):  # the server's step limit ended the episode: it is judged already
                        state["awm_reward"], state["awm_verdict"] = result["reward"], result.get("metadata")
                except CatalogError as exc:
                    content = str(exc)
                    ended = re.search(r"is over \(reward ([0-9.]+)\)", content)
                    if ended:  # an environment failure ended (and judged) the episode
                        state["awm_reward"] = float(ended.group(1))
            answers.append(vf.ToolMessage(role="tool", content=content, tool_call_id=call.id))
        if state.get("awm_reward") is not None:
            state["final_env_response"] = answers
        return answers

    @vf.stop
    async def answered(self, state: vf.State) -> bool:
        """The model replied without a tool call: that reply is the final answer."""
        if not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return last.role == "assistant" and not getattr(last, "tool_calls", None)

    @vf.cleanup
    async def finish_episode(self, state: vf.State) -> None:
        """End the episode on the server (the judge runs there, once) and give its instance back."""
        session = state.get("awm_session")
        if session is None:
            return
        try:
            if state.get("awm_reward") is None and state.get("error") is None:
                answer = ""
                if state["trajectory"]:
                    last = state["trajectory"][-1]["completion"][-1]
                    answer = last.content if isinstance(last.content, str) else ""
                result = await self._rpc("tools/call", {"session_id": session, "name": state["awm_end_tool"],
                                                        "arguments": {"final_answer": answer}})
                state["awm_reward"], state["awm_verdict"] = result["reward"], result.get("metadata")
        finally:
            await self._rpc("openenv/session/close", {"session_id": session})
            state["awm_session"] = None

    @vf.teardown
    async def close_clients(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


async def catalog_reward(state: vf.State) -> float:
    """The server judge's reward for the episode (0 when the episode could not be judged)."""
    reward = state.get("awm_reward")
    return float(reward) if reward is not None else 0.0


async def completed(state: vf.State) -> float:
    """1 when the judge classified the episode Completed (a metric, weight 0)."""
    verdict = state.get("awm_verdict") or {}
    return 1.0 if verdict.get("classification") == "Completed" else 0.0


def load_environment(catalog_url: str = "http://127.0.0.1:8000", scenarios: list[str] | None = None,
                     tasks_per_env: int | None = None, max_turns: int = 30, system_prompt: str = SYSTEM_PROMPT,
                     **kwargs: Any) -> vf.Environment:
    """The catalog served at `catalog_url` (`awm serve --openenv`) as a verifiers environment."""
    rows = catalog_rows(catalog_url, scenarios, tasks_per_env)
    if not rows:
        raise CatalogError(f"no task served by {catalog_url}")
    rubric = vf.Rubric(funcs=[catalog_reward, completed], weights=[1.0, 0.0])
    return CatalogEnv(catalog_url, dataset=Dataset.from_list(rows), eval_dataset=Dataset.from_list(rows),
                      system_prompt=system_prompt, rubric=rubric, max_turns=max_turns, **kwargs)
