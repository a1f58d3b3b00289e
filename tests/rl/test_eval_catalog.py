"""`awm eval catalog` on the demo store: pass@1 and pass@k of a policy that completes a known number of each task's
attempts, a run stopped by a configuration error and resumed without redoing what finished, the bound on model
requests in flight, the report's fields, and the command itself."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from awm_rl.agent import PolicyOutput, PolicyRequest, ScriptedPolicy
from awm_rl.evaluation.catalog import EvaluationRunError, RequestLimit, evaluate, read_episodes
from awm_rl.evaluation.metrics import pass_at_k
from awm_rl.reward import Judge
from tests.rl.conftest import solution_files


@pytest.fixture(scope="module")
def pool(demo_store, ray_address):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(demo_store.root, num_hosts=1, prefetch=2) as pool:
        yield pool


class AttemptPolicy:
    """The reference solutions on the first `good[task]` attempts of each task that start, a turn without its
    <think> reasoning (a format error) on the others. An episode runs in one thread: its attempt is chosen at
    turn 0 and kept per thread. Counts every generate call."""

    def __init__(self, good: dict[tuple[str, int], int], name: str = "attempts") -> None:
        self.reference = ScriptedPolicy.from_solutions(solution_files())
        self.good, self.name = good, name
        self.started: Counter[tuple[str, int]] = Counter()
        self.calls = 0
        self._lock, self._local = threading.Lock(), threading.local()

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        key = (request.scenario, request.task_idx)
        with self._lock:
            self.calls += 1
            if request.turn == 0:
                self._local.solve = self.started[key] < self.good.get(key, 0)
                self.started[key] += 1
        if self._local.solve:
            return self.reference.generate(request)
        return PolicyOutput(text="I will just answer.")  # no <think>, no call: the format check fails it


def _first_tasks(store, per_env: int) -> list[tuple[str, int]]:
    from awm_rl.evaluation.catalog import catalog_scenarios, select_tasks
    from awm_rl.quality.gate import ineligible_tasks

    scenarios = catalog_scenarios(store)
    return [(r.scenario, r.task_idx) for r in select_tasks(store, scenarios, per_env, ineligible_tasks(store, scenarios))]


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def test_pass_at_1_and_pass_at_k_per_environment_category_and_overall(demo_store, pool, tmp_path):
    tasks = _first_tasks(demo_store, 1)
    completed = dict(zip(tasks, [3, 1, 0], strict=True))  # of k=3 attempts, per task (one per environment)
    policy = AttemptPolicy(completed)
    limited = RequestLimit(policy, 2)
    report = evaluate(demo_store, pool, limited, Judge("code"), out_dir=tmp_path / "run", tasks_per_env=1, k=3,
                      concurrency=4)
    assert limited.peak <= 2  # never more than max_requests turns generated at once
    assert report.episodes == 9 and report.tasks == 3 and report.k == 3
    assert report.pass_at_1 == round(4 / 9, 4) and report.pass_at_k == round(2 / 3, 4)
    for (scenario, _), c in completed.items():
        group = report.per_environment[scenario]
        assert (group["pass_at_1"], group["pass_at_k"]) == (round(c / 3, 4), float(c > 0))
    assert sum(g["episodes"] for g in report.per_category.values()) == 9
    categories = {demo_store.scenario(s).category or "other" for s in report.per_environment}
    assert set(report.per_category) == categories
    assert report.failure_reasons == {"format:reasoning": 9 - 4}
    # Every episode is in the difficulty records once; each task's row counts its attempts here.
    from awm_resources.difficulty import load_difficulty

    recorded = load_difficulty(demo_store).tasks(run=report.difficulty_run)
    assert {key: t.completed for key, t in recorded.items()} == completed
    assert all(t.attempts == 3 for t in recorded.values())
    assert {(r["scenario"], r["task"]): r["completed_here"] for r in report.per_task} == completed
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    for field in ("policy", "reasoning", "tool_calling", "k", "tasks", "pass_at_1", "pass_at_k", "per_environment",
                  "per_category", "per_bucket", "failure_reasons", "mean_turns", "prompt_tokens", "completion_tokens",
                  "policy_cost_usd", "judge_cost_usd", "cost_usd", "per_task", "difficulty_run", "catalog_digest",
                  "episodes_run", "episodes_resumed", "wall_s"):
        assert field in saved, field
    assert saved["reasoning"] == "required" and saved["tool_calling"] == "text" and saved["episodes_run"] == 9
    env = next(iter(saved["per_environment"].values()))
    assert {"category", "tasks", "pass_at_1", "pass_at_k", "mean_turns", "prompt_tokens", "cost_usd",
            "failure_reasons"} <= set(env)
    # The same folder again with another plan is refused, naming what differs.
    with pytest.raises(EvaluationRunError, match="k 3 there, 2 now"):
        evaluate(demo_store, pool, policy, Judge("code"), out_dir=tmp_path / "run", tasks_per_env=1, k=2)


def test_a_run_stopped_by_a_configuration_error_resumes_without_redoing_episodes(demo_store, pool, tmp_path):
    from awm_rl.agent.policies import PolicyConfigError

    class BrokenAfter(AttemptPolicy):
        """The reference, until its key is 'revoked' after `limit` calls."""

        def __init__(self, limit: int) -> None:
            super().__init__({key: 2 for key in _first_tasks(demo_store, 1)}, name="reference-like")
            self.limit = limit

        def generate(self, request: PolicyRequest) -> PolicyOutput:
            if self.calls >= self.limit:
                raise PolicyConfigError("chat:demo: the API key was refused (set AWM_POLICY_API_KEY)")
            return super().generate(request)

    out = tmp_path / "run"
    # One episode at a time: the first task's two attempts (3 turns each) finish, the third episode meets the error.
    with pytest.raises(PolicyConfigError, match="API key"):
        evaluate(demo_store, pool, BrokenAfter(limit=8), Judge("code"), out_dir=out, tasks_per_env=1, k=2,
                 concurrency=1)
    kept = read_episodes(out)
    assert len(kept) == 2 and not (out / "report.json").exists()
    assert all(score.outcome == "completed" for _, score in kept.values())

    again = AttemptPolicy({key: 2 for key in _first_tasks(demo_store, 1)}, name="reference-like")
    report = evaluate(demo_store, pool, again, Judge("code"), out_dir=out, tasks_per_env=1, k=2, concurrency=2)
    assert report.episodes_resumed == 2 and report.episodes_run == 4
    # Only the missing episodes asked the policy for turns.
    done = read_episodes(out)
    assert again.calls == sum(done[name][0].turns for name in set(done) - set(kept))
    assert report.episodes == 6 and report.pass_at_1 == 1.0 and report.pass_at_k == 1.0
    from awm_resources.difficulty import load_difficulty

    recorded = load_difficulty(demo_store).tasks(run=report.difficulty_run)
    assert all(t.attempts == 2 for t in recorded.values()) and len(recorded) == 3  # no episode counted twice


def test_the_command_reports_the_reference_on_the_catalog(demo_store, tmp_path, capsys, monkeypatch):
    from awm_rl.evaluation.commands import catalog_main as main

    out = tmp_path / "cmd"
    code = main(["--policy", "reference", "--tasks-per-env", "1", "--k", "2", "--seed", "3", "--store",
                 str(demo_store.root), "--out", str(out), "--max-requests", "2", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["episodes"] == 6 and doc["pass_at_1"] == 1.0 and doc["pass_at_k"] == 1.0 and doc["seed"] == 3
    assert doc["max_requests"] == 2 and len(doc["per_environment"]) == 3
    # Resumed: nothing left to run (no runtime started), the same report; --prove replays the run's episodes as
    # proofs (the demo's tasks are proven already: nothing is added) and the gate still counts every task eligible.
    assert main(["--resume", str(out), "--store", str(demo_store.root), "--prove", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["episodes_run"] == 0 and again["episodes_resumed"] == 6 and again["pass_at_1"] == 1.0
    assert again["proofs"]["counts"]["proven"] == 6 and len(again["proofs"]["proven"]) == 3
    assert {g["eligible_tasks"] for g in again["proofs"]["gate"].values()} == {10}
    assert main(["--resume", str(out), "--k", "3", "--store", str(demo_store.root)]) == 2
    assert "k 2 there, 3 now" in capsys.readouterr().err
    assert main(["--resume", str(out), "--scenario", "issue_tracker", "--store", str(demo_store.root)]) == 2
    assert "--scenario issue_tracker would change that" in capsys.readouterr().err
    assert main(["--store", str(demo_store.root)]) == 2 and "--policy is required" in capsys.readouterr().err
    # A chat model without a key: one clear error at once, exit 2, nothing half-done left behind.
    for name in ("OPENAI_API_KEY", "AWM_POLICY_API_KEY", "AWM_POLICY_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--policy", "chat:openai/gpt-5", "--tasks-per-env", "1", "--store", str(demo_store.root),
                 "--out", str(tmp_path / "no-key")]) == 2
    err = capsys.readouterr().err
    assert "AWM_POLICY_API_KEY" in err and f"--resume {tmp_path / 'no-key'}" in err
    assert not read_episodes(tmp_path / "no-key")



def test_a_real_models_recorded_answers_ranked_with_tokens_and_cost(agent_awm1k, tmp_path, ray_address, monkeypatch):
    """A strong model's recorded answers on two AgentWorldModel-1K environments (../shared/real-model-agent),
    served over the OpenAI protocol on loopback, one request in flight at a time: the three recorded episodes
    complete in their recorded turns, and the report prices them (litellm's prices for the model)."""
    from awm_rl.agent import make_policy
    from awm_rl.reward import load_tasks
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.conftest import REAL_AGENT_DIR, agent_store_copy
    from tests.llm_conformance.fake_servers import FakeLLMServer

    agent_dir = REAL_AGENT_DIR
    recorded = {("banking_fintech_2", 0): 7, ("banking_fintech_2", 3): 5, ("crowdfunding_platform_1", 1): 4}
    store = agent_store_copy(agent_awm1k, tmp_path / "store")
    scenarios = sorted({s for s, _ in recorded})
    others = {s: [r.task_idx for r in load_tasks(store, s) if (s, r.task_idx) not in recorded] for s in scenarios}
    for name in ("OPENAI_API_KEY", "AWM_POLICY_API_KEY", "AWM_POLICY_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    server = FakeLLMServer(agent_dir / "recordings").start()
    try:
        policy = RequestLimit(make_policy("chat:openai/gpt-5", api_base=f"{server.url}/v1", api_key="sk-loopback",
                                          reasoning="required"), 1)
        with EnvironmentPool(store.root, num_hosts=1, prefetch=0) as pool:
            report = evaluate(store, pool, policy, Judge("code"), out_dir=tmp_path / "run", tasks_per_env=None,
                              scenarios=scenarios, excluded=others, concurrency=3)
    finally:
        server.stop()
    assert policy.peak == 1 and len(server.requests) == sum(recorded.values())
    assert report.episodes == 3 and report.pass_at_1 == 1.0 and report.failure_reasons == {}
    assert {(r["scenario"], r["task"]): r["turns"] for r in report.per_task} == recorded
    assert report.mean_turns == round(sum(recorded.values()) / 3, 3)
    assert report.prompt_tokens > 0 and report.completion_tokens > 0 and report.policy_cost_usd > 0
    assert report.cost_usd == report.policy_cost_usd  # the code judge costs nothing
    assert sum(g["policy_cost_usd"] for g in report.per_environment.values()) == pytest.approx(report.policy_cost_usd)
