"""`awm bench rollout`: N concurrent episodes end to end, the environment side of a training step.

A training step runs many episodes at once (the paper: 1,024). This runs N of them (default 1,024), all
concurrent, through the real agent loop (`awm_rl.agent.loop.run_episodes`: format checks, the meta-tools,
snapshots), the environment pool (`EnvironmentPool`: Ray host actors, sandboxed scenario workers) and the
code-mode verifiers (`awm_rl.reward.Judge`, sandboxed), with a policy that answers instantly by replaying
recorded turns: the reference solutions (`seeds/solutions/<scenario>.json`, or `--solutions DIR`) and, with
`--recordings DIR`, a real model's recorded answers (`<scenario>/rollout.t<task>.turn<k>.1.md`, e.g.
`../shared/real-model-agent/recordings` on its two AWM-1K environments after `awm import` of their folder).
So what it measures is the environment side's ceiling: nothing waits for a model.

Instances are acquired once, up front (`create_s`), and reused the way a trainer reuses them across steps:
each episode takes one and resets it (`reset_ms_*`, through Ray), runs, snapshots its databases, and
gives it back. Every tool call goes through the pool's batched path (`call_many`).

Reported: episodes/s and turns/s over the rollout phase; the environment side's latency of each tool call
as the loop saw it (p50/p99, and a PNG histogram); reset, snapshot and verification cost per episode;
memory (resident sets of the host actors with their sandboxed workers, Ray's own processes, this driver);
the outcome of every episode against its script's (each script's episodes must agree: same turns, fresh
instance each time); and the environment's share of a step projected for a GPU policy (`projection`: the
generation rate assumed and its source, tokens per turn measured from the replayed answers).

Timings depend on the machine's load (`machine.loadavg_*`): compare runs as ratios on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.processes import process_tree, rss_mb

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOLUTIONS = PROJECT_ROOT / "seeds" / "solutions"
DEFAULT_EPISODES = 1024
# The generation rate a GPU policy is assumed to sustain, and where the figure comes from (`--gen-tokens-per-s`).
DEFAULT_GEN_TOKENS_PER_S = 6600.0
GEN_RATE_SOURCE = ("vLLM (no tuning) on one H100, Qwen3-14B, ShareGPT prompts: 6,596 tokens/s in total "
                   "(GPUStack performance lab, docs.gpustack.ai/latest/performance-lab/qwen3-14b/h100); a 4B "
                   "policy generates faster, so the environment's share projected with it is an upper bound")
RECORDING = re.compile(r"rollout\.t(\d+)\.turn(\d+)\.1\.md")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


# ---------------------------------------------------------------------------------------------
# what the policy replays
def reference_scripts(folder: Path, scenarios: set[str]) -> dict[tuple[str, int], list[str]]:
    """The reference solutions in `folder` for the scenarios the store serves, as Qwen3 turns."""
    from awm_rl.agent.policies import ScriptedPolicy

    paths = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            scenario = json.loads(path.read_text(encoding="utf-8")).get("scenario")
        except (OSError, json.JSONDecodeError, AttributeError) as exc:
            raise ValueError(f"reference solution {path} is unreadable: {exc}") from None
        if scenario in scenarios:
            paths.append(path)
    return {k: [str(t) for t in v] for k, v in ScriptedPolicy.from_solutions(paths).scripts.items()} if paths else {}


def recorded_scripts(folder: Path, scenarios: set[str]) -> dict[tuple[str, int], list[str]]:
    """A model's recorded answers (`<scenario>/rollout.t<task>.turn<k>.1.md`) for the scenarios the store serves.
    Raises ValueError for a recording whose turns are not numbered 0..k without a gap."""
    out: dict[tuple[str, int], list[str]] = {}
    for sub in sorted(p for p in Path(folder).iterdir() if p.is_dir() and p.name in scenarios):
        turns: dict[int, dict[int, str]] = {}
        for path in sub.iterdir():
            m = RECORDING.fullmatch(path.name)
            if m:
                turns.setdefault(int(m.group(1)), {})[int(m.group(2))] = path.read_text(encoding="utf-8").strip()
        for task, by_turn in sorted(turns.items()):
            if sorted(by_turn) != list(range(len(by_turn))):
                raise ValueError(f"recording {sub}/rollout.t{task}.*: turns {sorted(by_turn)} are not 0..{len(by_turn) - 1}")
            out[(sub.name, task)] = [by_turn[k] for k in range(len(by_turn))]
    return out


def count_tokens(texts: list[str]) -> tuple[list[int], str]:
    """Tokens of each text and the tokenizer used: tiktoken's cl100k_base from the copy litellm ships (no
    download), else characters / 4."""
    try:
        import importlib.util

        import tiktoken

        spec = importlib.util.find_spec("litellm")  # not imported: it would fetch its price list
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("litellm's tokenizer files")
        cache = Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
        enc = tiktoken.get_encoding("cl100k_base")
        return [len(enc.encode(t, disallowed_special=())) for t in texts], "tiktoken cl100k_base"
    except Exception:  # noqa: BLE001 - no tokenizer file here: a stated approximation instead
        return [max(1, len(t) // 4) for t in texts], "characters / 4 (no tokenizer available)"


# ---------------------------------------------------------------------------------------------
class ReusedInstances:
    """The loop's environments over instances acquired up front: `acquire` takes a free one of the scenario and
    resets it (timed), `release` gives it back, tool calls take the pool's batched path. What a trainer does
    between steps, without a round trip to create an instance per episode."""

    def __init__(self, pool: Any, handles: dict[str, list[Any]]):
        self.pool = pool
        self.free = {s: deque(hs) for s, hs in handles.items()}
        self.lock = threading.Lock()
        self.reset_ms: list[float] = []
        self.snapshot_ms: list[float] = []

    def acquire(self, scenario: str) -> Any:
        with self.lock:
            handle = self.free[scenario].popleft()
        t0 = time.perf_counter()
        self.pool.reset(handle)
        self.reset_ms.append((time.perf_counter() - t0) * 1000)
        return handle

    def list_tools(self, handle: Any) -> list[dict[str, Any]]:
        return self.pool.list_tools(handle)

    def call_tool(self, handle: Any, name: str, arguments: dict[str, Any]) -> Any:
        from awm_rl.runtime.pool import ToolCall

        return self.pool.call_many([ToolCall(handle, name, arguments)])[0]

    def reset(self, handle: Any) -> None:
        self.pool.reset(handle)

    def snapshot(self, handle: Any) -> tuple[Path, Path]:
        t0 = time.perf_counter()
        try:
            return self.pool.snapshot(handle)
        finally:
            self.snapshot_ms.append((time.perf_counter() - t0) * 1000)

    def release(self, handle: Any) -> None:
        with self.lock:
            self.free[handle.scenario].append(handle)


# ---------------------------------------------------------------------------------------------
# memory
def pool_processes(pool: Any) -> tuple[list[Any], list[Any]]:
    """(the host actors with their descendants, i.e. the sandboxed scenario workers; Ray's own processes on
    this node, when this driver started them) as psutil processes."""
    host_procs = [p for st in pool.host_stats() if "pid" in st for p in process_tree(int(st["pid"]))]
    host_pids = {p.pid for p in host_procs}
    ray_procs: list[Any] = []
    try:
        import ray._private.worker as ray_worker

        node = getattr(ray_worker, "_global_node", None)
        if node is not None:
            for _role, proc in node.live_processes():
                ray_procs += [p for p in process_tree(proc.pid) if p.pid not in host_pids]
    except Exception:  # noqa: BLE001 - Ray's private process list: without it, no Ray figure
        pass
    return host_procs, ray_procs


def cpu_seconds(procs: list[Any]) -> float:
    """User + system CPU seconds the processes have used so far (those still alive)."""
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def pool_memory(pool: Any) -> dict[str, Any]:
    """Resident sets (MB) of the host actors with their descendants (the sandboxed scenario workers), of Ray's
    own processes on this node, and of this driver."""
    import psutil

    host_procs, ray_procs = pool_processes(pool)
    by_scenario: dict[str, float] = {}
    for p in host_procs:
        try:
            args = p.cmdline()
            if "awm_rl.runtime.worker" in args and os.path.basename(args[0]).startswith("python"):
                by_scenario[args[-1]] = by_scenario.get(args[-1], 0.0) + p.memory_info().rss / 2**20
        except psutil.Error:
            pass
    hosts = rss_mb(host_procs)
    return {"hosts_rss_mb": round(hosts, 1), "ray_system_rss_mb": round(rss_mb(ray_procs), 1),
            "driver_rss_mb": round(rss_mb([os.getpid()]), 1),
            "scenario_workers_rss_mb": {k: round(v, 1) for k, v in sorted(by_scenario.items())},
            "host_processes": len(host_procs)}


# ---------------------------------------------------------------------------------------------
def direct_baseline(pool: Any, handles: dict[str, list[Any]], episodes: list[Any]) -> dict[str, Any]:
    """The in-run baseline: the same tool calls the episodes made, sent straight to the pool at once
    (`call_many`, each episode's calls in order on one reset instance), without the agent loop, its threads,
    resets or snapshots. Its calls/s over the rollout's is what the loop costs on top of the pool."""
    from awm_rl.runtime.pool import ToolCall

    free = {s: list(hs) for s, hs in handles.items()}
    calls: list[ToolCall] = []
    for ep in episodes:
        handle = free[ep.scenario].pop()
        calls += [ToolCall(handle, st.format["tool_name"], st.format.get("arguments") or {}) for st in ep.steps
                  if st.tool is not None and st.format.get("action") == "call_tool"]
    used = [h for hs in handles.values() for h in hs]
    with ThreadPoolExecutor(max_workers=32) as ex:  # back to the initial databases first (not timed)
        list(ex.map(pool.reset, used))
    host_procs, ray_procs = pool_processes(pool)
    procs = host_procs + ray_procs + process_tree(os.getpid())[:1]
    c0, t0 = cpu_seconds(procs), time.perf_counter()
    results = pool.call_many(calls)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(procs) - c0
    # CPU per call barely depends on what else the machine runs (wall time does): what the calls would reach on
    # idle cores, if nothing but this pool used them
    per_cpu_s = len(calls) / cpu if cpu > 0 else None
    return {"calls": len(calls), "ok": sum(1 for r in results if r.ok), "wall_s": round(wall, 3),
            "calls_per_s": round(len(calls) / wall, 1) if wall > 0 else None,
            "cpu_s": round(cpu, 3), "calls_per_cpu_s": round(per_cpu_s, 1) if per_cpu_s else None,
            "calls_per_s_on_2_idle_cores": round(2 * per_cpu_s, 1) if per_cpu_s else None,
            "processes": len(procs)}


def plot_latencies(values: list[float], path: Path, title: str) -> Path | None:
    """A histogram of the tool-call latencies (log scale) with p50 and p99 marked."""
    if not values:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    low, high = max(min(values), 1e-3), max(max(values), 1e-2)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(values, bins=np.logspace(np.log10(low), np.log10(high * 1.01), 60), color="#4c72b0")
    ax.set_xscale("log")
    for q, style in ((0.5, "--"), (0.99, ":")):
        v = _pct(values, q)
        ax.axvline(v, color="black", linestyle=style, label=f"p{int(q * 100)} {v:.2f} ms")
    ax.set_xlabel("tool call, environment side (ms, as the agent loop timed it)")
    ax.set_ylabel("calls")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def projection(*, episodes: int, turns_per_episode: float, tokens_per_turn: float, tokenizer: str,
               env_step_s: float, gen_tokens_per_s: float, source: str) -> dict[str, Any]:
    """The environment's share of a step when a GPU policy generates the turns: generation time from the
    assumed rate and the measured tokens per turn; environment time as measured here (rollout + verification
    with an instant policy). No overlap between the two is assumed, so the share is an upper bound."""
    gen_s = episodes * turns_per_episode * tokens_per_turn / gen_tokens_per_s
    return {"gen_tokens_per_s_assumed": gen_tokens_per_s, "source": source,
            "tokens_per_turn_measured": round(tokens_per_turn, 1), "tokenizer": tokenizer,
            "turns_per_episode": round(turns_per_episode, 2), "generation_s_per_step": round(gen_s, 2),
            "environment_s_per_step": round(env_step_s, 2),
            "environment_share": round(env_step_s / (env_step_s + gen_s), 4) if env_step_s + gen_s else None}


def run_benchmark(store_root: Path, *, episodes: int = DEFAULT_EPISODES, solutions: Path | None = DEFAULT_SOLUTIONS,
                  recordings: Path | None = None, num_hosts: int | None = None, call_timeout_s: float = 10.0,
                  gen_tokens_per_s: float = DEFAULT_GEN_TOKENS_PER_S, gen_rate_source: str = GEN_RATE_SOURCE,
                  plot: Path | None = None, max_open_instances: int | None = None) -> dict[str, Any]:
    """Run `episodes` concurrent episodes and judge them; returns the report (module docstring). Raises
    ValueError when nothing can be replayed (naming what was looked for)."""
    from awm_resources.store import ArtifactStore
    from awm_rl.agent.loop import EpisodeSpec, LoopConfig, run_episodes
    from awm_rl.agent.policies import ScriptedPolicy
    from awm_rl.reward import Judge, load_tasks, score_episodes
    from awm_rl.runtime.pool import EnvironmentPool

    if episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {episodes}")
    store = ArtifactStore(store_root)
    served = {s for s in store.list_scenarios() if (store.scenario_dir(s) / "server.py").is_file()}
    scripts: dict[tuple[str, int], list[str]] = {}
    sources: dict[tuple[str, int], str] = {}
    for name, folder, read in (("reference", solutions, reference_scripts), ("recorded", recordings, recorded_scripts)):
        if folder is None:
            continue
        if not Path(folder).is_dir():
            raise ValueError(f"{name} answers: no folder {folder}")
        for key, turns in read(Path(folder), served).items():
            scripts[key], sources[key] = turns, name
    records = {}
    for scenario in sorted({s for s, _ in scripts}):
        for rec in load_tasks(store, scenario):
            records[(scenario, rec.task_idx)] = rec
    missing = [k for k in scripts if k not in records]
    for key in missing:  # a script for a task the store does not have: nothing to verify it against
        del scripts[key]
    if not scripts:
        raise ValueError(f"nothing to replay: no reference solution ({solutions}) or recording ({recordings}) "
                         f"is for a scenario of the store {store.root} with environment code "
                         f"({', '.join(sorted(served)) or 'none'})")
    keys = sorted(scripts)
    specs = [EpisodeSpec(scenario=k[0], task_idx=k[1], task=records[k].task)
             for k in (keys[i % len(keys)] for i in range(episodes))]
    per_scenario = Counter(s.scenario for s in specs)
    policy = ScriptedPolicy(scripts, name="replay")
    work = Path(tempfile.mkdtemp(prefix="awm-bench-rollout-"))
    load_start = os.getloadavg()[0]
    t_open = time.perf_counter()
    pool = EnvironmentPool(store.root, num_hosts=num_hosts, max_instances=max(episodes, 64), prefetch=0,
                           call_timeout_s=call_timeout_s, max_open_instances=max_open_instances)
    try:
        open_s = time.perf_counter() - t_open
        for scenario in per_scenario:  # each scenario imported once before creation is timed (cold_start_ms)
            pool.release(pool.acquire(scenario))
        t0 = time.perf_counter()
        handles = {s: pool.acquire_many(s, n) for s, n in sorted(per_scenario.items())}
        create_s = time.perf_counter() - t0
        envs = ReusedInstances(pool, handles)
        config = LoopConfig(max_turns=max(len(v) for v in scripts.values()) + 1, snapshot_dir=work / "snapshots")
        host_procs, ray_procs = pool_processes(pool)
        procs = host_procs + ray_procs + process_tree(os.getpid())[:1]
        t0, c0, all0 = time.perf_counter(), time.process_time(), cpu_seconds(procs)
        episodes_out = run_episodes(envs, policy, specs, config, concurrency=episodes)
        rollout_s, rollout_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        rollout_all_cpu_s = cpu_seconds(procs) - all0
        memory = pool_memory(pool)
        isolation = pool.isolation()
        cold_start = {s: round(pool.cold_start_ms(s) or 0.0, 1) for s in sorted(per_scenario)}
        t0 = time.perf_counter()
        scores = score_episodes(episodes_out, [records[(s.scenario, s.task_idx)] for s in specs], Judge("code"))
        verify_s = time.perf_counter() - t0
        direct = direct_baseline(pool, handles, episodes_out)
        for handles_of in handles.values():
            for h in handles_of:
                pool.release(h)
    finally:
        pool.close()
        shutil.rmtree(work, ignore_errors=True)

    # list_tools is answered from the pool's cached listing: only call_tool reaches the environment
    tool_ms = [st.tool.latency_ms for e in episodes_out for st in e.steps
               if st.tool is not None and st.format.get("action") == "call_tool"]
    turns = sum(len(e.steps) for e in episodes_out)
    verdict_ms = [s.judge.verifier["elapsed_ms"] for s in scores if s.judge and s.judge.verifier
                  and s.judge.verifier.get("elapsed_ms") is not None]
    per_script: dict[tuple[str, int], dict[str, Any]] = {}
    for spec, ep, sc in zip(specs, episodes_out, scores, strict=True):
        entry = per_script.setdefault((spec.scenario, spec.task_idx), {
            "scenario": spec.scenario, "task_idx": spec.task_idx, "source": sources[(spec.scenario, spec.task_idx)],
            "script_turns": len(scripts[(spec.scenario, spec.task_idx)]), "episodes": 0, "completed": 0,
            "outcomes": Counter(), "turns": Counter()})
        entry["episodes"] += 1
        entry["completed"] += sc.outcome == "completed"
        entry["outcomes"][sc.outcome] += 1
        entry["turns"][len(ep.steps)] += 1
    for entry in per_script.values():
        entry["consistent"] = len(entry["outcomes"]) == 1 and len(entry["turns"]) == 1
        entry["outcomes"], entry["turns"] = dict(entry["outcomes"]), {str(k): v for k, v in entry["turns"].items()}
    token_counts, tokenizer = count_tokens([t for k in keys for t in scripts[k]
                                            if sources[k] == "recorded"] or [t for k in keys for t in scripts[k]])
    tokens_per_turn = statistics.fmean(token_counts) if token_counts else 0.0
    report: dict[str, Any] = {
        "episodes": episodes, "scripts": len(keys), "sources": dict(Counter(sources[k] for k in keys)),
        "scenarios": dict(sorted(per_scenario.items())), "hosts": pool.num_hosts, "os_isolation": isolation,
        "completed": sum(s.outcome == "completed" for s in scores),
        "expected_completed": sum(e["episodes"] for e in per_script.values()
                                  if e["consistent"] and e["outcomes"].get("completed")),
        "outcomes": dict(Counter(s.outcome for s in scores)),
        "terminations": dict(Counter(e.termination for e in episodes_out)),
        "consistent": all(e["consistent"] for e in per_script.values()),
        "per_script": sorted(per_script.values(), key=lambda e: (e["scenario"], e["task_idx"])),
        "pool_start_s": round(open_s, 2), "cold_start_ms": cold_start, "create_s": round(create_s, 3),
        "create_ms_per_instance": round(create_s * 1000 / episodes, 4),
        "rollout_s": round(rollout_s, 3), "rollout_driver_cpu_s": round(rollout_cpu_s, 2),
        "rollout_cpu_s": round(rollout_all_cpu_s, 2),
        "episodes_per_s_on_2_idle_cores": (round(2 * episodes / rollout_all_cpu_s, 1) if rollout_all_cpu_s > 0
                                           else None),
        "episodes_per_s": round(episodes / rollout_s, 2), "turns": turns, "turns_per_s": round(turns / rollout_s, 1),
        "tool_calls": len(tool_ms), "tool_calls_ok": sum(1 for e in episodes_out for st in e.steps if st.tool is not None
                                                         and st.format.get("action") == "call_tool" and st.tool.ok), "tool_calls_per_s": round(len(tool_ms) / rollout_s, 1),
        "direct_baseline": direct,
        "rollout_vs_direct_calls_per_s": (round(len(tool_ms) / rollout_s / direct["calls_per_s"], 4)
                                          if direct["calls_per_s"] else None),
        "tool_call_ms_p50": _pct(tool_ms, 0.5), "tool_call_ms_p99": _pct(tool_ms, 0.99),
        "tool_call_ms_max": round(max(tool_ms), 4) if tool_ms else None,
        "reset_ms_p50": _pct(envs.reset_ms, 0.5), "reset_ms_p99": _pct(envs.reset_ms, 0.99),
        "reset_ms_per_episode": round(statistics.fmean(envs.reset_ms), 3) if envs.reset_ms else None,
        "snapshot_ms_p50": _pct(envs.snapshot_ms, 0.5),
        "verify_s": round(verify_s, 3), "verify_ms_per_episode": round(verify_s * 1000 / episodes, 3),
        "verdict_ms_p50": _pct(verdict_ms, 0.5), "verdicts": len(verdict_ms),
        "memory": memory,
        "projection": projection(episodes=episodes, turns_per_episode=turns / episodes,
                                 tokens_per_turn=tokens_per_turn, tokenizer=tokenizer,
                                 env_step_s=rollout_s + verify_s, gen_tokens_per_s=gen_tokens_per_s,
                                 source=gen_rate_source),
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_start": round(load_start, 2),
                    "loadavg_1m_end": round(os.getloadavg()[0], 2)},
        "notes": ["the policy answers instantly (recorded turns): rollout figures are the environment side's ceiling",
                  "tool_call_ms_*: each call_tool as the agent loop timed it (pool queue, Ray, the host, the "
                  "sandboxed worker), with every episode running at once",
                  "reset_ms_*: each episode's reset of its reused instance, through Ray; create_s: acquiring all "
                  "instances once, up front",
                  "verify_s: every episode's code-mode verifier (sandboxed), after the rollout",
                  "direct_baseline: the same calls straight to the pool at once, no loop (in-run baseline); "
                  "rollout_vs_direct_calls_per_s: the rollout's tool calls/s over it",
                  "*_cpu_s: CPU seconds of every process involved (driver, host actors, sandboxed workers, Ray's "
                  "own when this driver started them); *_on_2_idle_cores: 2 CPU-seconds per second spent on the "
                  "same work, what a quiet 2-core machine would reach (wall times depend on the load)"],
    }
    if plot is not None:
        written = plot_latencies(tool_ms, Path(plot), f"{episodes} concurrent episodes: {len(tool_ms)} tool calls")
        report["plot"] = str(written) if written else None
    return report


def _print_text(r: dict[str, Any]) -> None:
    p = r["projection"]
    print(f"{r['episodes']} episodes ({r['scripts']} scripts: {r['sources']}) on {r['scenarios']}")
    print(f"  completed {r['completed']} (expected {r['expected_completed']}), outcomes {r['outcomes']}")
    print(f"  rollout {r['rollout_s']} s: {r['episodes_per_s']} episodes/s, {r['turns_per_s']} turns/s; tool call "
          f"p50 {r['tool_call_ms_p50']} ms, p99 {r['tool_call_ms_p99']} ms")
    print(f"  on 2 idle cores (CPU time): {r['episodes_per_s_on_2_idle_cores']} episodes/s, "
          f"{r['direct_baseline']['calls_per_s_on_2_idle_cores']} calls/s straight to the pool")
    print(f"  {r['tool_calls_per_s']} tool calls/s in the loop, {r['direct_baseline']['calls_per_s']} sent straight "
          f"to the pool (ratio {r['rollout_vs_direct_calls_per_s']})")
    print(f"  reset p50 {r['reset_ms_p50']} ms per episode; create {r['create_ms_per_instance']} ms per instance; "
          f"verification {r['verify_ms_per_episode']} ms per episode (verdict p50 {r['verdict_ms_p50']} ms)")
    print(f"  memory: hosts {r['memory']['hosts_rss_mb']} MB, Ray {r['memory']['ray_system_rss_mb']} MB")
    print(f"  projected: {p['generation_s_per_step']} s generating at {p['gen_tokens_per_s_assumed']:g} tokens/s "
          f"({p['tokens_per_turn_measured']} tokens/turn) vs {p['environment_s_per_step']} s environment: "
          f"share {p['environment_share']}")
    if r.get("plot"):
        print(f"  plot: {r['plot']}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="awm bench rollout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES,
                        help=f"concurrent episodes (default {DEFAULT_EPISODES})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--home", type=Path, default=None, help="artifact store root (default $AWM_HOME)")
    parser.add_argument("--solutions", type=Path, default=DEFAULT_SOLUTIONS,
                        help="reference solutions folder (default seeds/solutions)")
    parser.add_argument("--no-solutions", action="store_true", help="replay only --recordings")
    parser.add_argument("--recordings", type=Path, default=None,
                        help="a model's recorded answers: <scenario>/rollout.t<task>.turn<k>.1.md")
    parser.add_argument("--hosts", type=int, default=None, help="host actors (default: CPU count, at most 4)")
    parser.add_argument("--max-open", type=int, default=None,
                        help="open instance databases per scenario and host before idle ones are parked (default: the pool's)")
    parser.add_argument("--gen-tokens-per-s", type=float, default=DEFAULT_GEN_TOKENS_PER_S,
                        help=f"a GPU policy's generation rate for the projection (default {DEFAULT_GEN_TOKENS_PER_S:g})")
    parser.add_argument("--gen-rate-source", default=GEN_RATE_SOURCE, help="where that rate comes from")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG of the tool-call latency distribution (default: beside --out, else none)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    if args.gen_tokens_per_s <= 0:
        parser.error(f"--gen-tokens-per-s must be positive, got {args.gen_tokens_per_s:g}")
    from awm_resources.store import ArtifactStore

    plot = args.plot or (args.out.with_suffix(".png") if args.out else None)
    try:
        report = run_benchmark(ArtifactStore(args.home).root, episodes=args.episodes,
                               solutions=None if args.no_solutions else args.solutions, recordings=args.recordings,
                               num_hosts=args.hosts, gen_tokens_per_s=args.gen_tokens_per_s,
                               gen_rate_source=args.gen_rate_source, plot=plot, max_open_instances=args.max_open)
    except ValueError as exc:
        print(f"awm bench rollout: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    else:
        _print_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
