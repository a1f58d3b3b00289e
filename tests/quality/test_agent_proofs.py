"""Issue 38 item 3: completed agent episodes become proofs (the strong model's recorded episodes).

../shared/real-model-agent holds two AgentWorldModel-1K environments and, turn by turn, what a strong model
answered as the agent on three of their tasks. Each recording is replayed through the agent loop on the
runtime's pool (ScriptedPolicy over the recorded texts), and the episodes are then proven: each completed
one, replayed on a fresh instance, passes its verifier and becomes the task's reference solution. An episode
whose final answer says the task is already done while nothing was done is listed for review.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from awm_resources.store import ArtifactStore
from tests.conftest import REAL_AGENT_DIR as AGENT
from tests.conftest import agent_store_copy

TURN = re.compile(r"rollout\.t(\d+)\.turn(\d+)\.1\.md$")
POLICY = "recorded:openai/gpt-5"


def _scripts() -> dict[tuple[str, int], list[str]]:
    """(scenario, task) -> the recorded answers in turn order."""
    found: dict[tuple[str, int], dict[int, str]] = {}
    for path in (AGENT / "recordings").glob("*/rollout.t*.turn*.1.md"):
        m = TURN.search(path.name)
        assert m, path
        found.setdefault((path.parent.name, int(m.group(1))), {})[int(m.group(2))] = path.read_text(encoding="utf-8")
    return {key: [turns[i] for i in sorted(turns)] for key, turns in found.items()}


@pytest.fixture(scope="module")
def agent_store(agent_awm1k, tmp_path_factory):
    return agent_store_copy(agent_awm1k, tmp_path_factory.mktemp("agent_proofs_store"))


def _episodes(store: ArtifactStore, scripts: dict[tuple[str, int], list[str]], tmp: Path):
    from awm_rl.agent import EpisodeSpec, LoopConfig, ScriptedPolicy, run_episode
    from awm_rl.reward.tasks import load_task
    from awm_rl.runtime.pool import EnvironmentPool

    policy = ScriptedPolicy(scripts, name=POLICY)
    config = LoopConfig(max_turns=20, snapshot_dir=tmp)
    with EnvironmentPool(store.root, num_hosts=1, prefetch=0) as pool:
        return [run_episode(pool, policy, EpisodeSpec(s, t, load_task(store, s, t).task), config)
                for s, t in sorted(scripts)]


def test_recorded_episodes_become_proofs_with_provenance(agent_store, ray_address, tmp_path, monkeypatch, capsys):
    from awm_resources.provenance import environment_digest
    from awm_rl.agent.policies import solution_turns
    from awm_rl.quality.commands import quality_main
    from awm_rl.quality.proofs import PROOFS_FILE, code_digest, load_episodes, prove_episodes
    from awm_rl.quality.solutions import load_solutions

    scripts = _scripts()
    assert sorted(scripts) == [("banking_fintech_2", 0), ("banking_fintech_2", 3), ("crowdfunding_platform_1", 1)]
    # An agent that claims the task was already done and did nothing: crowdfunding task 1 asks for a donation.
    # It looks the campaign up (the loop wants one successful call before an answer), then claims it.
    lookup = [{"tool": "get_corporate_campaign_by_code", "arguments": {"campaign_code": "CORP-CAMP-2025-Q1"}}]
    claims = {("crowdfunding_platform_1", 1): solution_turns(lookup, "The anonymous donation was already done."),
              # An agent stopped by a tool that answers 500 on valid input (the gate finds it too: stored dates
              # the server cannot parse), on crowdfunding task 0.
              ("crowdfunding_platform_1", 0): solution_turns(
                  [{"tool": "summarize_user_impact_metrics", "arguments": {}}], "I could not get the metrics.")}
    episodes = _episodes(agent_store, scripts, tmp_path / "snapshots")
    blocked, claim = _episodes(agent_store, claims, tmp_path / "snapshots")
    assert [e.termination for e in episodes] == ["final_answer"] * 3, [e.termination_detail for e in episodes]
    versions = {s: environment_digest(agent_store, s) for s in ("banking_fintech_2", "crowdfunding_platform_1")}

    # The function `awm eval` calls on its episodes; the claim is judged without keeping anything.
    review = prove_episodes(agent_store, [claim, blocked], run="claim", keep=False)
    finding, stopped = review["episodes"]
    assert stopped["kind"] == "blocked_evidence" and stopped["calls"][-1]["status"] == 500, stopped
    assert stopped["detail"].startswith("the episode ended (environment_error) after 1 server error(s); last: "
                                        "summarize_user_impact_metrics -> HTTP 500")
    assert finding["kind"] == "review" and finding["verifier"]["verdict"] == "others"
    assert "already done" in finding["detail"] and "the verifier says 'others'" in finding["detail"]
    assert not agent_store.has("crowdfunding_platform_1", PROOFS_FILE)

    # Episodes as `awm rollout` writes them (trajectory.json) and as `awm eval catalog` does (episodes/*.json).
    folder = tmp_path / "episodes"
    for i, e in enumerate(episodes):
        (folder / str(i)).mkdir(parents=True)
        if i == 1:
            (folder / str(i) / f"{e.scenario}.t{e.task_idx}.a0.json").write_text(json.dumps(
                {"attempt": 0, "episode": json.loads(e.model_dump_json()), "score": {"outcome": "completed"}}))
        else:
            (folder / str(i) / "trajectory.json").write_text(e.model_dump_json(), encoding="utf-8")
    loaded = load_episodes(folder)
    assert sorted((e.scenario, e.task_idx) for e in loaded) == sorted((e.scenario, e.task_idx) for e in episodes)
    report = prove_episodes(agent_store, loaded, run="real-model-agent")

    assert report["proven"] == {"banking_fintech_2": [0, 3], "crowdfunding_platform_1": [1]}, report["episodes"]
    assert report["counts"]["proven"] == 3 and report["environment_versions"] == versions
    for scenario, tasks in report["proven"].items():
        solutions = agent_store.read_json(scenario, "solutions.json")["tasks"]
        by_idx = {t["task_idx"]: t for t in solutions}
        for idx in tasks:
            kept = by_idx[idx]
            assert kept["source"] == "agent_episode" and kept["proven"]
            assert kept["provenance"] == {"policy": POLICY, "run": "real-model-agent",
                                          "environment_version": versions[scenario]}
            episode = next(e for e in episodes if (e.scenario, e.task_idx) == (scenario, idx))
            assert [c["tool"] for c in kept["calls"]] == [s.format["tool_name"] for s in episode.steps
                                                          if s.format.get("action") == "call_tool"]
        # The gate reads them as the tasks' reference solutions.
        assert set(load_solutions(agent_store.scenario_dir(scenario), [])) >= set(tasks)
        log = agent_store.read_json(scenario, PROOFS_FILE)["runs"][-1]
        assert log["run"] == "real-model-agent" and log["solutions_added"] == tasks

    # The quality gate now counts the task proven, by the agent's trajectory.
    from awm_rl.quality.gate import quality

    gate = {t["task_idx"]: t for t in quality(agent_store, ["crowdfunding_platform_1"])["scenarios"][0]["tasks"]}
    assert gate[1]["solvable"] == "yes", gate[1]

    # The agents' evidence reaches the stored gate result without running anything again: the claim is listed on
    # task 1 for review (its proof keeps it eligible); task 0's episode that ended on the tool's 500 stays with it.
    prove_episodes(agent_store, [claim, blocked], run="evidence")
    log = agent_store.read_json("crowdfunding_platform_1", PROOFS_FILE)["runs"][-1]
    assert log["code_digest"] == code_digest(agent_store, "crowdfunding_platform_1")
    gate = {t["task_idx"]: t for t in quality(agent_store, ["crowdfunding_platform_1"])["scenarios"][0]["tasks"]}
    assert gate[1]["eligible"] and gate[1]["agent_review"][0]["run"] == "evidence", gate[1]
    assert "already done" in gate[1]["agent_review"][0]["detail"]
    assert (gate[0]["verdict"], gate[0]["blocked_by"]) == ("blocked", "tool") and not gate[0]["eligible"]
    assert "summarize_user_impact_metrics" in gate[0]["reason"], gate[0]["reason"]

    # Deposit account 6 and 500 USDC: the replay on a fresh instance made the same calls as the agent.
    banking = next(f for f in report["episodes"] if (f["scenario"], f["task_idx"]) == ("banking_fintech_2", 0))
    assert all(c["status"] < 400 for c in banking["calls"]) and banking["verifier"]["verdict"] == "complete"

    # `awm quality --proofs-from DIR` again: the same proofs, nothing new to keep (the tasks are proven now).
    monkeypatch.setenv("AWM_HOME", str(agent_store.root))
    capsys.readouterr()
    assert quality_main(["crowdfunding_platform_1", "--proofs-from", str(folder), "--run", "again"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 episode(s): 1 proven") and "crowdfunding_platform_1 task 1" in out
    assert agent_store.read_json("crowdfunding_platform_1", PROOFS_FILE)["runs"][-1]["solutions_added"] == []
    assert quality_main(["--proofs-from", str(tmp_path / "nowhere")]) == 2


def test_agent_evidence_blocks_only_unproven_eligible_tasks():
    """An eligible task no proof backs is blocked by an agent episode that ended on server errors, naming it; a
    proven task stays eligible (a proof outweighs an episode's failure); other verdicts stay as the gate found them."""
    from awm_rl.quality.task_links import apply_agent_evidence

    stopped = {"policy": "chat:m", "run": "r1", "detail": "the episode ended (environment_error) after 1 server "
               "error(s); last: create_dispatch_batch -> HTTP 500: Internal Server Error", "calls": []}
    tasks = [{"task_idx": 0, "verdict": "ok", "eligible": True},
             {"task_idx": 1, "verdict": "ok", "eligible": True, "solvable": "yes"},
             {"task_idx": 2, "verdict": "vacuous", "eligible": False}]
    apply_agent_evidence(tasks, {i: {"blocked": [stopped], "review": []} for i in range(3)})
    assert (tasks[0]["verdict"], tasks[0]["blocked_by"], tasks[0]["eligible"]) == ("blocked", "tool", False)
    assert "chat:m, run r1" in tasks[0]["reason"] and "create_dispatch_batch -> HTTP 500" in tasks[0]["reason"]
    assert (tasks[1]["verdict"], tasks[1]["eligible"], tasks[2]["verdict"]) == ("ok", True, "vacuous")


def test_what_counts_as_an_answer_that_claims_the_task_done():
    from awm_rl.quality.proofs import claims_done

    assert claims_done("The anonymous donation was already done.")
    assert claims_done("Done: the deposit account is open and 500 USDC moved.")
    assert claims_done("No change is needed; the pass already exists.")
    assert not claims_done("I could not complete the transfer: the account is frozen.")
    assert not claims_done("Unable to finish: the tool failed.")
    assert not claims_done("Here are the three lobbies.") and not claims_done(None)
