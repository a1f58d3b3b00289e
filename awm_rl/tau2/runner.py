"""Run a policy over a τ² domain through our agent loop and score it with τ²'s own evaluator.

`evaluate_tau2()` loads τ²'s tasks, opens one session per task and trial (τ²'s environment in the
task's initial state, the user's first line), runs the episodes with `run_episodes`, turns each
into τ²'s `SimulationRun` (the trajectory of τ² messages, the termination reason: the user's or
agent's stop, else max steps / agent error / user error) and scores it with τ²'s
`evaluate_simulation` (EvaluationType.ALL: database state, expected actions, communicated
information, as the task's reward basis says), then pass^k over trials with τ²'s `pass_hat_k` (all k
succeed) and pass@k (one of k succeeds: the paper's Table 4 metric), with the paper's τ² cells beside.
Under `out_dir`: `tasks/<task>.trial<n>.json` (our episode, τ²'s simulation and reward info) and
`report.json`. The package version and the user simulator are recorded with the scores.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from awm_resources.store import atomic_write_json
from awm_rl.agent import EpisodeSpec, LoopConfig, run_episodes
from awm_rl.agent.policies import Policy, make_policy
from awm_rl.tau2.data import PACKAGE, Tau2Unavailable, check_domain, load_tasks, paper_rows, tau2_version
from awm_rl.tau2.environment import Recorder, Tau2Environment, open_session
from awm_rl.tau2.ground_truth import ground_truth_policy
from awm_rl.tau2.users import user_factory

PROTOCOL = ("You act through two tools: call list_tools once first to see the domain's tools, then call_tool "
            "to use them, exactly one call per turn; a turn without a tool call is your message to the user.")
SESSIONS_AT_ONCE = 8  # τ² environments open at a time (airline's database is ~30 MB in memory)
SOLO_PROTOCOL = ("There is no user to talk to: solve the ticket with tool calls alone and, when it is solved, "
                 "answer once without a tool call (that ends the task).")


@dataclass
class Tau2Report:
    domain: str
    policy: str
    user_model: str
    solo: bool
    trials: int
    tasks: int
    average_reward: float
    pass_hat_k: dict[int, float]
    per_task: list[dict[str, Any]]
    out_dir: str
    wall_s: float
    package: str = PACKAGE
    package_version: str | None = None
    failures: dict[str, int] = field(default_factory=dict)
    pass_at_k: dict[int, float] = field(default_factory=dict)  # success within k trials (the paper's Pass@k)

    def summary(self) -> dict[str, Any]:
        return {"domain": self.domain, "policy": self.policy, "user_model": self.user_model, "solo": self.solo,
                "trials": self.trials, "tasks": self.tasks, "average_reward": self.average_reward,
                "pass_hat_k": self.pass_hat_k, "pass_at_k": self.pass_at_k, "failures": self.failures,
                "per_task": self.per_task, "package": self.package, "package_version": self.package_version, "out_dir": self.out_dir,
                "wall_s": self.wall_s, "paper": paper_rows()}


def build_policy(spec: str, tasks: list[Any], *, solo: bool, store_root: Path | None = None,
                 **policy_kwargs: Any) -> Policy:
    """`ground_truth` replays the expected actions; `grpo_latest` the newest trained model; else `make_policy`."""
    if spec == "ground_truth":
        return ground_truth_policy(tasks, solo=solo)
    if spec in ("grpo_latest", "vllm:grpo_latest"):
        from awm_rl.bfcl.runner import latest_grpo_model

        if store_root is None:
            from awm_resources.store import default_home

            store_root = default_home()
        spec = f"{'vllm' if spec.startswith('vllm') else 'transformers'}:{latest_grpo_model(store_root)}"
    try:
        return make_policy(spec, **policy_kwargs)
    except ValueError as exc:
        raise Tau2Unavailable(f"{exc} (τ² also takes: ground_truth, grpo_latest)") from exc


def system_prompt(domain: str, solo: bool) -> str:
    """τ²'s own agent instructions and the domain's policy document, plus how our tool protocol works."""
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, AGENT_SOLO_INSTRUCTION, SYSTEM_PROMPT

    from awm_rl.tau2.data import make_environment

    policy = make_environment(domain, solo=solo).get_policy()
    instruction = AGENT_SOLO_INSTRUCTION.format(stop_function_name="done", stop_token="###STOP###") if solo \
        else AGENT_INSTRUCTION
    return SYSTEM_PROMPT.format(agent_instruction=f"{instruction}\n\n{PROTOCOL}" + (f"\n{SOLO_PROTOCOL}" if solo else ""),
                                domain_policy=policy)


def termination(session: Any, episode: Any) -> Any:
    from tau2.data_model.simulation import TerminationReason

    if session.user_error:
        return TerminationReason.USER_ERROR
    if session.stopped_by == "user":
        return TerminationReason.USER_STOP
    if session.stopped_by == "agent":
        return TerminationReason.AGENT_STOP
    return TerminationReason.MAX_STEPS if episode.termination == "max_turns" else TerminationReason.AGENT_ERROR


def score(domain: str, session: Any, episode: Any, trial: int, *, solo: bool) -> Any:
    """τ²'s SimulationRun of one episode, with τ²'s reward info."""
    from tau2.data_model.simulation import SimulationRun
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    now = datetime.now(timezone.utc).isoformat()
    simulation = SimulationRun(id=str(uuid.uuid4()), task_id=session.task.id, start_time=now, end_time=now,
                               duration=episode.wall_s, termination_reason=termination(session, episode),
                               messages=session.messages, trial=trial)
    simulation.reward_info = evaluate_simulation(simulation=simulation, task=session.task,
                                                 evaluation_type=EvaluationType.ALL, solo_mode=solo, domain=domain)
    return simulation


def evaluate_tau2(domain: str, policy: str | Policy, *, out_dir: Path, user_model: str = "scripted", solo: bool = False,
                  trials: int = 1, split: str = "base", limit: int | None = None, ids: list[str] | None = None,
                  concurrency: int = 4, max_turns: int = 60, store_root: Path | None = None,
                  user_temperature: float = 0.0, **policy_kwargs: Any) -> Tau2Report:
    """Run and score; see the module docstring for what lands in `out_dir`."""
    from tau2.metrics.agent_metrics import is_successful, pass_hat_k

    started = time.perf_counter()
    check_domain(domain, solo)
    if trials < 1:
        raise Tau2Unavailable("trials must be at least 1")
    tasks = load_tasks(domain, split=split, limit=limit, ids=ids)
    if not tasks:
        raise Tau2Unavailable(f"no τ² tasks selected from {domain} ({split})")
    make_user = None if solo else user_factory(user_model, temperature=user_temperature)
    if isinstance(policy, str):
        policy = build_policy(policy, tasks, solo=solo, store_root=store_root, **policy_kwargs)
    config = LoopConfig(max_turns=max_turns, window=None, system_prompt=system_prompt(domain, solo), max_tool_text=None,
                        waived_rules=frozenset({"reasoning", "no_successful_call", "arguments_schema"}))
    out_dir = Path(out_dir)
    rows: list[dict[str, Any]] = []
    chunk = max(SESSIONS_AT_ONCE, concurrency)
    for trial in range(trials):
        for start in range(0, len(tasks), chunk):  # sessions in chunks: each holds a whole database
            recorder = Recorder(policy)
            sessions = [open_session(domain, t, i, solo=solo, make_user=make_user)
                        for i, t in enumerate(tasks) if start <= i < start + chunk]
            env = Tau2Environment(sessions, recorder)
            specs = [EpisodeSpec(scenario=s.task.id, task_idx=s.index, task=s.first_message) for s in sessions]
            episodes = run_episodes(env, recorder, specs, config, concurrency=concurrency)
            for session, episode in zip(sessions, episodes, strict=True):
                simulation = score(domain, session, episode, trial, solo=solo)
                rows.append(_row(session, episode, simulation, trial, out_dir, is_successful))
    per_task = _per_task(rows, trials, pass_hat_k)
    failures: dict[str, int] = {}
    for row in rows:
        if not row["success"]:
            failures[row["termination_reason"]] = failures.get(row["termination_reason"], 0) + 1
    report = Tau2Report(
        domain=domain, policy=policy.name, user_model="none (solo)" if solo else user_model, solo=solo, trials=trials,
        tasks=len(tasks), average_reward=round(sum(r["reward"] for r in rows) / len(rows), 4),
        pass_hat_k={k: round(sum(t["pass_hat_k"][k] for t in per_task) / len(per_task), 4) for k in range(1, trials + 1)},
        pass_at_k={k: round(sum(pass_at_k(trials, t["successes"], k) for t in per_task) / len(per_task), 4)
                   for k in range(1, trials + 1)},
        per_task=per_task, out_dir=str(out_dir), wall_s=round(time.perf_counter() - started, 2),
        package_version=tau2_version(), failures=failures)
    atomic_write_json(out_dir / "report.json", report.summary())
    return report


def pass_at_k(trials: int, successes: int, k: int) -> float:
    """The chance that at least one of k of the trials succeeds (unbiased estimator; τ² ships only pass^k)."""
    from math import comb

    return 1.0 - comb(trials - successes, k) / comb(trials, k)


def _row(session: Any, episode: Any, simulation: Any, trial: int, out_dir: Path, is_successful) -> dict[str, Any]:
    info = simulation.reward_info
    path = out_dir / "tasks" / f"{_safe(session.task.id)}.trial{trial}.json"
    atomic_write_json(path, {"task_id": session.task.id, "trial": trial, "reward": info.reward,
                             "simulation": json.loads(simulation.model_dump_json()),
                             "episode": json.loads(episode.model_dump_json())})
    return {"task_id": session.task.id, "trial": trial, "reward": float(info.reward),
            "success": bool(is_successful(info.reward)), "termination_reason": simulation.termination_reason.value,
            "reward_breakdown": {str(k.value if hasattr(k, "value") else k): v
                                 for k, v in (info.reward_breakdown or {}).items()},
            "note": (info.info or {}).get("note") if isinstance(info.info, dict) else None,
            "loop_termination": episode.termination, "steps": episode.turns, "trajectory": str(path)}


def _per_task(rows: list[dict[str, Any]], trials: int, pass_hat_k) -> list[dict[str, Any]]:
    out = []
    for task_id in dict.fromkeys(r["task_id"] for r in rows):
        mine = [r for r in rows if r["task_id"] == task_id]
        successes = sum(r["success"] for r in mine)
        out.append({"task_id": task_id, "successes": successes, "trials": trials,
                    "pass_hat_k": {k: pass_hat_k(trials, successes, k) for k in range(1, trials + 1)},
                    "rewards": [r["reward"] for r in mine], "termination_reasons": [r["termination_reason"] for r in mine],
                    "reward_breakdown": mine[0]["reward_breakdown"], "note": mine[0]["note"],
                    "trajectories": [r["trajectory"] for r in mine]})
    return out


def _safe(text: str) -> str:
    """A file name for a task id (telecom's run past 200 characters: cut, with a hash to keep them apart)."""
    import hashlib
    import re

    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', text)[:80]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
