"""Run a policy over MCP-Universe tasks through our agent loop and score every answer with MCP-Universe's evaluators.

Tasks are MCP-Universe task files (JSON: question, output format, MCP servers, evaluators), given as a
benchmark YAML of its repository (its `tasks:` list, its agent's `servers:` for tasks naming none), a folder
of task files or one file: the PyPI package ships the code and evaluators, not the task files. Each task's
servers come from MCP-Universe's own server list; a server that needs a live service (an API key, the network,
a program fetched at run time, a local application) is named with its reason, and offline (the default) its
tasks are skipped, listed with those names. The others run: one episode per task (`run_episodes`, the task's
question plus its output format as the user message), then MCP-Universe's `Task.evaluate` on the final answer.
Reported as MCP-Universe reports it: success rate (every evaluator passed), average evaluator score, average
steps; per task every evaluator's verdict. Under `out_dir`: `tasks/<task>.json` and `report.json`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_resources.store import atomic_write_json
from awm_rl.agent import EpisodeSpec, LoopConfig, run_episodes
from awm_rl.agent.policies import Policy, ScriptedPolicy, make_policy, solution_turns
from awm_rl.mcp_universe.environment import MCPUniverseEnvironment, MCPUniverseUnavailable, Worker

PACKAGE = "mcpuniverse"
# MCP-Universe's Python servers that reach a live service; servers started with npx / docker / uvx fetch their
# code at run time, and servers with env parameters need keys: both are found from its server list.
LIVE_SERVICES = {
    "weather": "the US National Weather Service API (network)",
    "wikipedia": "the Wikipedia API (network)",
    "yfinance": "Yahoo Finance (network)",
    "fetch": "fetches web pages (network)",
    "google-search": "SerpAPI (network, key)",
    "serper-search": "Serper (network, key)",
    "jina-scrape-llm-summary": "Jina and an LLM endpoint (network, keys)",
    "google-sheets": "Google Sheets (network, service account)",
    "blender": "a running Blender with its MCP add-on",
    "python-code-sandbox": "a Docker code sandbox at SANDBOX_ADDRESS",
    "markitdown": "the markitdown-mcp program (not in the package)",
}
FETCHING_COMMANDS = ("npx", "docker", "uvx")
PROTOCOL = ("You act through two tools: call list_tools once first to see the tools of this task's MCP servers, then "
            "call_tool to use them, exactly one call per turn. When you are done, answer without a tool call; that "
            "answer is scored.")
PAPER_NOTE = ("the paper's MCP-Universe cells (arXiv 2602.10090, Table 4) are not among this project's references "
              "(/work/shared/DESIGN.md has none), so no paper row is printed beside ours")


@dataclass
class MCPUniverseReport:
    tasks_path: str
    policy: str
    tasks: int
    ran: int
    success_rate: float | None
    average_evaluator_score: float | None
    average_steps: float | None
    per_task: list[dict[str, Any]]
    skipped: dict[str, list[str]]
    live_servers: dict[str, str]
    out_dir: str
    wall_s: float
    online: bool
    package: str = PACKAGE
    package_version: str | None = None
    paper: str = PAPER_NOTE

    def summary(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("tasks_path", "policy", "online", "tasks", "ran", "success_rate",
                                              "average_evaluator_score", "average_steps", "skipped", "live_servers",
                                              "per_task", "package", "package_version", "out_dir", "wall_s", "paper")}


@dataclass
class TaskFile:
    """One task file and the servers its episode gets (its own, else the benchmark agent's)."""

    id: str
    path: Path
    servers: list[str] = field(default_factory=list)


def find_tasks(path: Path) -> list[TaskFile]:
    """The task files of a benchmark YAML, a folder (recursively) or one JSON file, in a stable order."""
    path = Path(path)
    if not path.exists():
        raise MCPUniverseUnavailable(f"no MCP-Universe tasks at {path} (a benchmark .yaml, a folder of task .json "
                                     "files, or one)")
    if path.is_dir():
        files = sorted(path.rglob("*.json"))
        if not files:
            raise MCPUniverseUnavailable(f"no task .json files under {path}")
        return [TaskFile(id=str(f.relative_to(path).with_suffix("")), path=f) for f in files]
    if path.suffix == ".json":
        return [TaskFile(id=path.stem, path=path)]
    if path.suffix in (".yaml", ".yml"):
        return _benchmark_tasks(path)
    raise MCPUniverseUnavailable(f"{path}: expected a benchmark .yaml, a task .json or a folder")


def _benchmark_tasks(path: Path) -> list[TaskFile]:
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except yaml.YAMLError as exc:
        raise MCPUniverseUnavailable(f"{path} is not valid YAML: {exc}") from None
    agents = {d["spec"].get("name"): d["spec"] for d in docs if d.get("kind") == "agent" and isinstance(d.get("spec"), dict)}
    out: list[TaskFile] = []
    for doc in docs:
        if doc.get("kind") != "benchmark":
            continue
        spec = doc.get("spec") or {}
        agent = agents.get(spec.get("agent"), {})
        servers = [s["name"] for s in (agent.get("config") or {}).get("servers") or [] if isinstance(s, dict)]
        for rel in spec.get("tasks") or []:
            found = next((base / rel for base in (path.parent, *path.parents[:3]) if (base / rel).is_file()), None)
            if found is None:
                raise MCPUniverseUnavailable(f"{path}: task file {rel!r} not found beside it or in its parent folders")
            out.append(TaskFile(id=str(Path(rel).with_suffix("")), path=found, servers=servers))
    if not out:
        raise MCPUniverseUnavailable(f"{path} lists no tasks (no 'kind: benchmark' document with 'tasks:')")
    return out


def live_reason(name: str, config: dict[str, Any] | None) -> str | None:
    """Why server `name` needs a live service (None: it runs here offline), from MCP-Universe's server list."""
    if config is None:
        return "not in MCP-Universe's server list"
    if name in LIVE_SERVICES:
        return LIVE_SERVICES[name]
    command = Path(config.get("command") or "").name
    if command in FETCHING_COMMANDS:
        return f"started with {command}, which fetches it at run time (network)"
    if config.get("env"):
        return f"needs {', '.join(config['env'])}"
    return None


def build_policy(spec: str, **policy_kwargs: Any) -> Policy:
    """`scripted:<file.json>` ({task id: {"calls": [{"tool", "arguments"}], "final_answer"}}) replays fixed calls
    and answers; anything else goes to `make_policy` (chat:<model>, transformers:<path>, vllm:<model>, tiny)."""
    if spec.startswith("scripted:"):
        file = Path(spec.split(":", 1)[1])
        try:
            scripts = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise MCPUniverseUnavailable(f"scripted policy file {file}: {exc}") from None
        return ScriptedPolicy({(task_id, 0): solution_turns(s.get("calls") or [], s.get("final_answer") or "")
                               for task_id, s in scripts.items()}, name=f"scripted:{file.name}")
    return make_policy(spec, **policy_kwargs)


def question(described: dict[str, Any]) -> str:
    """The user message: the task's question, and its output format as MCP-Universe's agents are told it."""
    text = described["question"]
    if described.get("output_format"):
        text += ("\n\nAnswer with one JSON object in this format, and nothing else:\n"
                 + json.dumps(described["output_format"], indent=2, ensure_ascii=False))
    return text


def evaluate_mcp_universe(tasks_path: Path, policy: str | Policy, *, out_dir: Path, online: bool = False,
                          max_turns: int = 20, concurrency: int = 2, limit: int | None = None,
                          python: Path | None = None, worker_timeout_s: float = 120.0,
                          **policy_kwargs: Any) -> MCPUniverseReport:
    """Run and score; see the module docstring for what lands in `out_dir`."""
    started = time.perf_counter()
    tasks = find_tasks(tasks_path)[:limit] if limit else find_tasks(tasks_path)
    worker = Worker(python, timeout_s=worker_timeout_s)
    try:
        configs = worker.request("servers")["servers"]
        described = {t.id: worker.request("describe", path=str(t.path)) for t in tasks}
        servers_of = {t.id: described[t.id]["servers"] or t.servers for t in tasks}
        live = {name: reason for name in sorted({s for ss in servers_of.values() for s in ss})
                if (reason := live_reason(name, configs.get(name))) is not None}
        skipped = {tid: [f"{s}: {live[s]}" for s in servers if s in live]
                   for tid, servers in servers_of.items() if not online and any(s in live for s in servers)}
        runnable = [t for t in tasks if t.id not in skipped]
        if isinstance(policy, str):
            policy = build_policy(policy, **policy_kwargs)
        env = MCPUniverseEnvironment(worker, {t.id: servers_of[t.id] for t in runnable})
        config = LoopConfig(max_turns=max_turns, window=None, system_prompt=PROTOCOL, max_tool_text=None,
                            waived_rules=frozenset({"reasoning", "no_successful_call", "arguments_schema"}))
        specs = [EpisodeSpec(scenario=t.id, task_idx=0, task=question(described[t.id])) for t in runnable]
        episodes = run_episodes(env, policy, specs, config, concurrency=concurrency)
        rows = []
        for task, episode in zip(runnable, episodes, strict=True):
            results = worker.request("evaluate", path=str(task.path), answer=episode.final_answer or "")["results"]
            passed = sum(1 for r in results if r["passed"])
            row = {"task_id": task.id, "success": bool(results) and passed == len(results),
                   "evaluator_score": passed / len(results) if results else 0.0, "steps": episode.turns,
                   "termination": episode.termination, "servers": servers_of[task.id], "evaluators": results}
            path = Path(out_dir) / "tasks" / f"{_safe(task.id)}.json"
            atomic_write_json(path, {**row, "episode": json.loads(episode.model_dump_json())})
            rows.append({**row, "trajectory": str(path)})
        version = worker.version
    finally:
        worker.close()
    n = len(rows)
    report = MCPUniverseReport(
        tasks_path=str(tasks_path), policy=policy.name, tasks=len(tasks), ran=n, online=online,
        success_rate=round(sum(r["success"] for r in rows) / n, 4) if n else None,
        average_evaluator_score=round(sum(r["evaluator_score"] for r in rows) / n, 4) if n else None,
        average_steps=round(sum(r["steps"] for r in rows) / n, 2) if n else None,
        per_task=rows, skipped=skipped, live_servers=live, out_dir=str(out_dir),
        wall_s=round(time.perf_counter() - started, 2), package_version=version)
    atomic_write_json(Path(out_dir) / "report.json", report.summary())
    return report


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]
