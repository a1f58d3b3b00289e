"""Proofs from agent episodes: a completed episode's tool calls, replayed on a fresh instance, prove its task.

Any evaluated policy's episodes (`awm eval`, rollouts, training) are evidence about the tasks: the calls an
episode made, replayed in order on a fresh instance of the stored environment (the env-check worker, as the
quality gate runs reference solutions), and judged by the task's code-mode verifier, either pass (the task is
proven solvable with that trajectory as its reference solution, kept in `solutions.json` with its provenance:
policy, run, environment version) or not. Episodes that are no proof are sorted for the gate and a reviewer:

- `blocked_evidence`: it failed and its last tool answers were server errors (5xx, or no answer at all);
- `review`: its final answer says the task is done (or already done) while the verifier disagrees: both
  sides' evidence (the answer and the last calls; the verifier's dict and the rows it reads that changed).

Every run's findings are appended to `agent_proofs.json` in the scenario folder, with the digest of the server
code and initial database they were found on (`code_digest`): the quality gate takes the agents' evidence for
`blocked` and for review from there while that code and database are what it checks (`agent_evidence`).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_resources.provenance import environment_digest
from awm_resources.store import ArtifactStore
from awm_rl.quality.solutions import SOLUTIONS_FILE, broken_call, solution_feedback

PROOFS_FILE = "agent_proofs.json"
# A final answer that claims the task is done, or that nothing was left to do.
CLAIMS_DONE = re.compile(r"\b(done|complete[ds]?|completed|success(fully)?|already|nothing (left )?to do|"
                         r"no (further )?(changes?|action) (is |was )?(needed|required))\b", re.I)
# ... unless it says the opposite ("could not complete", "unable to", "failed").
NEGATED = re.compile(r"(\b(not|no way|unable|cannot|impossible|failed|fails)\b|n't\b)", re.I)


def claims_done(answer: str | None) -> bool:
    """Whether a final answer says the task is done or was already done."""
    return bool(answer and CLAIMS_DONE.search(answer) and not NEGATED.search(answer))


@dataclass
class EpisodeFinding:
    """What one episode proves or shows about its task."""

    scenario: str
    task_idx: int
    policy: str
    kind: str  # proven | blocked_evidence | review | failed | not_replayed
    detail: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    final_answer: str | None = None
    verifier: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "task_idx": self.task_idx, "policy": self.policy, "kind": self.kind,
                "detail": self.detail, "calls": self.calls, "final_answer": self.final_answer,
                "verifier": self.verifier}


def episode_calls(episode: Any) -> list[dict[str, Any]]:
    """The tool calls an episode made that the environment answered, in order, as a solution's calls."""
    return [{"tool": s.format.get("tool_name"), "arguments": s.format.get("arguments") or {}}
            for s in episode.steps if s.format.get("action") == "call_tool" and s.tool is not None
            and s.format.get("tool_name")]


def _server_errors_at_end(episode: Any) -> list[dict[str, Any]]:
    """The episode's last tool answers (call_tool), when they were server errors: 5xx or no answer."""
    answered = [s for s in episode.steps if s.format.get("action") == "call_tool" and s.tool is not None]
    tail = []
    for step in reversed(answered):
        if step.tool.ok or (step.tool.status is not None and step.tool.status < 500
                            and step.tool.error_kind != "environment"):
            break
        tail.append({"tool": step.format.get("tool_name"), "arguments": step.format.get("arguments") or {},
                     "status": step.tool.status, "answer": step.tool.text[:600]})
    return list(reversed(tail))


def prove_episodes(store: ArtifactStore, episodes: list[Any], *, run: str | None = None, keep: bool = True,
                   timeout_s: float = 60.0, verifier_timeout_s: float = 10.0) -> dict[str, Any]:
    """Replay each episode's calls on a fresh instance of its environment and judge them (module docstring).

    With `keep`, each task proven here and not proven before gets the episode as its reference solution in
    `solutions.json` (with provenance), and the findings are appended to `agent_proofs.json`. Returns
    `{"episodes": [finding...], "proven": {scenario: [task_idx]}, "run", "environment_versions"}`."""
    by_scenario: dict[str, list[Any]] = {}
    for episode in episodes:
        by_scenario.setdefault(episode.scenario, []).append(episode)
    run = run or time.strftime("%Y%m%d-%H%M%S")
    findings: list[EpisodeFinding] = []
    versions: dict[str, str] = {}
    for scenario, group in sorted(by_scenario.items()):
        if not store.has(scenario, "server.py"):
            findings += [EpisodeFinding(scenario, e.task_idx, e.policy, "not_replayed",
                                        f"no environment {scenario!r} with code in {store.root}") for e in group]
            continue
        versions[scenario] = environment_digest(store, scenario)
        found = _prove_scenario(store, scenario, group, timeout_s, verifier_timeout_s)
        findings += found
        if keep:
            _keep(store, scenario, found, run, versions[scenario])
    proven: dict[str, list[int]] = {}
    for f in findings:
        if f.kind == "proven" and f.task_idx not in proven.setdefault(f.scenario, []):
            proven[f.scenario].append(f.task_idx)
    return {"run": run, "environment_versions": versions, "proven": {k: sorted(v) for k, v in proven.items() if v},
            "counts": {kind: sum(1 for f in findings if f.kind == kind) for kind in
                       ("proven", "blocked_evidence", "review", "failed", "not_replayed")},
            "episodes": [f.to_dict() for f in findings]}


def _prove_scenario(store: ArtifactStore, scenario: str, episodes: list[Any], timeout_s: float,
                    verifier_timeout_s: float) -> list[EpisodeFinding]:
    from awm_rl.isolation.verification import VerifierJob, run_verifiers
    from awm_rl.quality.envcheck import check_env_code
    from awm_rl.reward.tasks import CODE_FUNCTION, load_tasks

    records = {r.task_idx: r for r in load_tasks(store, scenario)}
    findings: list[EpisodeFinding | None] = [None] * len(episodes)
    replay: dict[int, dict[str, Any]] = {}
    codes: dict[str, str] = {}
    for n, episode in enumerate(episodes):
        record = records.get(episode.task_idx)
        entry = record.verifier_for(CODE_FUNCTION) if record else None
        if entry is None:
            findings[n] = EpisodeFinding(scenario, episode.task_idx, episode.policy, "not_replayed",
                                         f"task {episode.task_idx} has no code-mode verifier to judge a replay")
            continue
        replay[n] = {"calls": episode_calls(episode), "final_answer": episode.final_answer}
        codes[str(n)] = entry["code"]
    if replay:
        with tempfile.TemporaryDirectory(prefix="awm-proofs-") as tmp:
            code = store.read_text(scenario, "server.py")
            check = check_env_code(code, store.path(scenario, "initial.db"), timeout_s=timeout_s, solutions=replay,
                                   snapshot_dir=Path(tmp))
            runs = check.solutions or {}
            keys = [str(n) for n in replay if str(n) in runs]
            jobs = [VerifierJob(code=codes[k], initial_db=Path(runs[k]["initial_db"]), final_db=Path(runs[k]["final_db"]),
                                final_answer=runs[k].get("final_answer")) for k in keys]
            outcomes = dict(zip(keys, run_verifiers(jobs, timeout_s=verifier_timeout_s), strict=True)) if jobs else {}
            for n in replay:
                k, episode = str(n), episodes[n]
                if k not in runs:
                    findings[int(k)] = EpisodeFinding(scenario, episode.task_idx, episode.policy, "not_replayed",
                                                      f"the environment could not replay it: {check.error}")
                    continue
                findings[int(k)] = _judge(scenario, episode, runs[k], codes[k], outcomes[k])
    return [f for f in findings if f is not None]


def _judge(scenario: str, episode: Any, run: dict[str, Any], code: str, outcome: Any) -> EpisodeFinding:
    """One replayed episode: a proof, evidence for `blocked`, a disagreement for review, or a plain failure."""
    verdict = outcome.verdict if outcome.ok else f"{outcome.error_kind}: {outcome.error}"
    verifier = {"verdict": verdict, "result": outcome.result}
    calls = [{k: c.get(k) for k in ("tool", "arguments", "status")} for c in run["calls"]]
    base = {"calls": calls, "final_answer": episode.final_answer, "verifier": verifier}
    completed = episode.termination == "final_answer"
    broken = broken_call(run)
    if completed and outcome.ok and outcome.verdict == "complete" and broken is None:
        return EpisodeFinding(scenario, episode.task_idx, episode.policy, "proven",
                              f"{len(calls)} call(s) replayed on a fresh instance; the verifier says complete", **base)
    errors = _server_errors_at_end(episode)
    if errors:
        last = errors[-1]
        return EpisodeFinding(scenario, episode.task_idx, episode.policy, "blocked_evidence",
                              f"the episode ended ({episode.termination}) after {len(errors)} server error(s); last: "
                              f"{last['tool']} -> HTTP {last['status']}: {last['answer'][:300]}",
                              **{**base, "calls": errors})
    if completed and claims_done(episode.final_answer):
        feedback = solution_feedback(run, code, verdict, outcome.result)
        return EpisodeFinding(scenario, episode.task_idx, episode.policy, "review",
                              f"the agent says: {episode.final_answer[:600]!r}; the verifier says {verdict!r}. "
                              f"Replay: {feedback}", **base)
    why = (f"the episode ended with {episode.termination}: {episode.termination_detail or ''}".strip()
           if not completed else f"replayed, the verifier says {verdict!r}"
           + (f"; call {broken[0] + 1} ({broken[1]['tool']}) answered HTTP {broken[1]['status']}" if broken else ""))
    return EpisodeFinding(scenario, episode.task_idx, episode.policy, "failed", why, **base)


def _keep(store: ArtifactStore, scenario: str, findings: list[EpisodeFinding], run: str, version: str) -> None:
    """Proven tasks without a proven solution get this episode's; every finding is logged."""
    solutions = store.read_json(scenario, SOLUTIONS_FILE) if store.has(scenario, SOLUTIONS_FILE) else {"tasks": []}
    by_idx = {int(t["task_idx"]): t for t in solutions.get("tasks", [])}
    quality = store.read_json(scenario, "quality.json") if store.has(scenario, "quality.json") else {}
    proven_before = {t["task_idx"] for t in quality.get("tasks", []) if t.get("solvable") == "yes"}
    added = []
    for finding in findings:
        idx = finding.task_idx
        if finding.kind != "proven" or idx in proven_before or (by_idx.get(idx) or {}).get("proven"):
            continue
        by_idx[idx] = {"task_idx": idx, "calls": [{"tool": c["tool"], "arguments": c["arguments"]} for c in finding.calls],
                       "final_answer": finding.final_answer, "proven": True, "source": "agent_episode",
                       "provenance": {"policy": finding.policy, "run": run, "environment_version": version}}
        added.append(idx)
    if added:
        store.write_json(scenario, SOLUTIONS_FILE, {"tasks": [by_idx[i] for i in sorted(by_idx)]})
    log = store.read_json(scenario, PROOFS_FILE) if store.has(scenario, PROOFS_FILE) else {"runs": []}
    log["runs"].append({"run": run, "environment_version": version, "code_digest": code_digest(store, scenario),
                        "solutions_added": added, "episodes": [f.to_dict() for f in findings]})
    store.write_json(scenario, PROOFS_FILE, log)


def code_digest(store: ArtifactStore, scenario: str) -> str:
    """The server code and initial database an episode ran on (not the tasks, verifiers or solutions, which a
    proof itself changes): agents' evidence about the tools holds while these are the same."""
    digest = hashlib.sha256()
    for name in ("server.py", "initial.db"):
        digest.update(store.path(scenario, name).read_bytes() if store.has(scenario, name) else b"-")
    return digest.hexdigest()[:16]


def agent_evidence(store: ArtifactStore, scenario: str) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """task_idx -> {"blocked": [...], "review": [...]}: the agent episodes logged in `agent_proofs.json` on the
    environment's current code and initial database that ended on server errors, or that claimed the task done
    while its verifier disagreed (each with policy, run and the finding's detail)."""
    if not store.has(scenario, PROOFS_FILE):
        return {}
    current = code_digest(store, scenario)
    out: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for run in store.read_json(scenario, PROOFS_FILE).get("runs", []):
        if run.get("code_digest") != current:
            continue
        for finding in run.get("episodes", []):
            kind = {"blocked_evidence": "blocked", "review": "review"}.get(finding.get("kind"))
            if kind is not None:
                out.setdefault(int(finding["task_idx"]), {"blocked": [], "review": []})[kind].append(
                    {"policy": finding.get("policy"), "run": run.get("run"), "detail": finding.get("detail"),
                     "calls": finding.get("calls", [])[-3:]})
    return out


def load_episodes(folder: Path) -> list[Any]:
    """Every episode under `folder`: `awm rollout`'s trajectory.json, `awm eval catalog`'s episodes/*.json
    (`{"episode": ..., "score": ...}`), or any JSON file holding an Episode or a list of them."""
    import json

    from pydantic import ValidationError

    from awm_rl.agent.episode import Episode

    if not folder.is_dir():
        raise FileNotFoundError(f"no folder of episodes at {folder}")
    out = []
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        for item in data if isinstance(data, list) else [data]:
            if isinstance(item, dict) and isinstance(item.get("episode"), dict):
                item = item["episode"]
            if isinstance(item, dict) and {"scenario", "task_idx", "steps"} <= set(item):
                try:
                    out.append(Episode.model_validate(item))
                except ValidationError as exc:
                    raise ValueError(f"{path}: not a readable episode: {exc.errors()[0]['msg']}") from exc
    return out
