"""Episodes end to end against the real runtime pool (Ray host actors, generated env code)."""

from __future__ import annotations

import json

import pytest

from awm_rl.agent import (
    EpisodeSpec,
    LoopConfig,
    PolicyOutput,
    ScriptedPolicy,
    TransformersPolicy,
    run_episode,
    run_episodes,
)
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn
from awm_rl.evaluation.commands import rollout_main
from awm_rl.reward import Judge, load_task, load_tasks, score_episode, score_episodes
from tests.rl.conftest import solution_files


@pytest.fixture(scope="module")
def demo_pool(demo_store):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(demo_store.root, num_hosts=2, prefetch=2) as pool:
        yield pool


@pytest.fixture(scope="module")
def reference():
    files = solution_files()
    assert files, "seeds/solutions/ holds no reference solutions"
    return ScriptedPolicy.from_solutions(files)


@pytest.mark.slow
def test_reference_solutions_of_the_demo_batch_are_completed(demo_store, demo_pool, reference, tmp_path):
    records = [r for s in demo_store.list_scenarios() for r in load_tasks(demo_store, s)]
    assert {(r.scenario, r.task_idx) for r in records} == set(reference.scripts), "one reference solution per demo task"
    specs = [EpisodeSpec(r.scenario, r.task_idx, r.task) for r in records]
    episodes = run_episodes(demo_pool, reference, specs, LoopConfig(snapshot_dir=tmp_path), concurrency=8)
    scores = score_episodes(episodes, records, Judge("code"))
    for episode, score in zip(episodes, scores, strict=True):
        assert score.outcome == "completed", (episode.scenario, episode.task_idx, episode.termination_detail, score.reasons)
        assert score.step_rewards == [1.0] * episode.turns
        assert episode.termination == "final_answer"
        assert all(step.format["ok"] for step in episode.steps)
        assert episode.turns == len(reference.scripts[(episode.scenario, episode.task_idx)])
        assert episode.steps[0].format["action"] == "list_tools" and episode.steps[1].tool.ok
    assert len(scores) == 30


def _episode(pool, store, texts, tmp_path, scenario="issue_tracker", task_idx=0, **config):
    record = load_task(store, scenario, task_idx)
    policy = ScriptedPolicy.from_texts(scenario, task_idx, texts)
    episode = run_episode(pool, policy, EpisodeSpec(scenario, task_idx, record.task),
                          LoopConfig(snapshot_dir=tmp_path, **config))
    verdict = Judge("code").judge(episode, record) if episode.termination in ("final_answer", "max_turns") else None
    return episode, score_episode(episode, verdict)


def _call(tool: str, arguments) -> str:
    return render_turn("Calling the tool.", {"name": "call_tool", "arguments": {"tool_name": tool, "arguments": arguments}})


BAD_POLICIES = {
    "no tool call": ([render_turn("I can answer directly.", None, "There are 3 bugs.")], "list_tools_first", 1),
    "two calls": ([list_tools_turn() + "\n<tool_call>\n{\"name\": \"list_tools\", \"arguments\": {}}\n</tool_call>"],
                  "multiple_tool_calls", 1),
    "malformed JSON": ([list_tools_turn(), '<think>go</think>\n<tool_call>{"name": "call_tool", "arguments": {tool_name: x}</tool_call>'],
                       "tool_call_json", 2),
    "unknown tool": ([list_tools_turn(), call_tool_turn("Delete it all.", "drop_all_tables", {})], "unknown_tool", 2),
    "50 kB argument": ([list_tools_turn(), _call("list_repository_issues", json.dumps({"owner": "a" * 50_000, "repo": "r"}))],
                       "arguments_too_large", 2),
    "endless text": ([PolicyOutput(text="<think>" + "and then " * 2000, finish_reason="length")], "response_too_long", 1),
    "no reasoning": (['<tool_call>\n{"name": "list_tools", "arguments": {}}\n</tool_call>'], "reasoning", 1),
    "schema mismatch": ([list_tools_turn(), _call("list_repository_issues", json.dumps({"owner": 5}))], "arguments_schema", 2),
    "answer without a call": ([list_tools_turn(), render_turn("Done.", None, "Done.")], "no_successful_call", 2),
}


@pytest.mark.parametrize("case", list(BAD_POLICIES))
def test_bad_policies_get_format_errors(demo_store, demo_pool, tmp_path, case):
    texts, rule, turns = BAD_POLICIES[case]
    episode, score = _episode(demo_pool, demo_store, texts, tmp_path)
    assert episode.termination == "format_error" and episode.format_rule == rule, episode.termination_detail
    assert episode.turns == turns
    assert score.outcome == "format_error" and score.reward == -1.0 and score.step_rewards == [-1.0] * turns
    assert rule in score.reasons


def test_agent_errors_are_fed_back_and_the_agent_can_recover(demo_store, demo_pool, reference, tmp_path):
    solution = reference.scripts[("issue_tracker", 0)]
    bad_call = call_tool_turn("Try a wrong repository first.", "list_repository_issues",
                              {"owner": "nobody-here", "repo": "missing-repo"})
    episode, score = _episode(demo_pool, demo_store, [solution[0], bad_call, *solution[1:]], tmp_path)
    wrong = episode.steps[1].tool
    assert not wrong.ok and 400 <= wrong.status < 500, wrong
    assert episode.messages[5] == {"role": "tool", "content": wrong.text}
    assert score.outcome == "completed"


def test_running_out_of_turns_is_judged(demo_store, demo_pool, reference, tmp_path):
    solution = reference.scripts[("issue_tracker", 0)]
    episode, score = _episode(demo_pool, demo_store, [solution[0]] + [solution[1]] * 5, tmp_path, max_turns=4)
    assert episode.termination == "max_turns" and episode.turns == 4
    assert score.judge is not None and score.outcome == "agent_error"  # no final answer for a read task


class RecordingPolicy:
    """Wraps a policy and keeps the conversations it was shown."""

    def __init__(self, inner):
        self.inner, self.name, self.seen = inner, "recording", []

    def generate(self, request):
        self.seen.append([m["content"] for m in request.messages])
        return self.inner.generate(request)


def test_the_policy_sees_the_truncated_window(demo_store, demo_pool, reference, tmp_path):
    solution = reference.scripts[("issue_tracker", 0)]
    turns = [solution[0]] + [solution[1]] * 4 + [solution[-1]]
    policy = RecordingPolicy(ScriptedPolicy.from_texts("issue_tracker", 0, turns))
    record = load_task(demo_store, "issue_tracker", 0)
    episode = run_episode(demo_pool, policy, EpisodeSpec("issue_tracker", 0, record.task),
                          LoopConfig(window=1, snapshot_dir=tmp_path))
    assert episode.termination == "final_answer" and len(episode.messages) == 2 + 2 * 5 + 1
    assert [len(seen) for seen in policy.seen] == [2, 4, 6, 6, 6, 6]
    last = policy.seen[-1]
    assert last[:4] == [m["content"] for m in episode.messages[:4]]  # system, task, list_tools exchange
    assert last[4:] == [m["content"] for m in episode.messages[10:12]]  # the last exchange only


def test_server_error_stops_with_zero(corpus_store, tmp_path):
    from awm_rl.runtime.pool import EnvironmentPool

    # gofundme task 0 creates a campaign the seed data already holds: the generated handler raises
    # an IntegrityError and answers 500 (a real environment failure).
    arguments = {"title": "Help Maya’s Recovery", "category_name": "Medical", "goal_amount_usd": 12000,
                 "beneficiary_name": "Maya Hernandez", "location_city": "Austin", "location_region": "TX",
                 "image_metadata": [{"filename": "maya-hospital.jpg", "alt": "Maya smiling in a hospital bed"}]}
    texts = [list_tools_turn(), call_tool_turn("Create it.", "create_campaign", arguments), render_turn("ok", None, "ok")]
    with EnvironmentPool(corpus_store.root, num_hosts=1, prefetch=0) as pool:
        episode, score = _episode(pool, corpus_store, texts, tmp_path, scenario="gofundme", task_idx=0)
    assert episode.termination == "environment_error" and episode.turns == 2
    assert episode.steps[1].tool.status == 500
    assert score.outcome == "environment_error" and score.reward == 0.0 and score.step_rewards == [0.0, 0.0]


def test_tiny_transformers_policy_runs_an_episode(demo_store, demo_pool, tmp_path):
    from awm_rl.agent.tiny_model import build_tiny_qwen3

    model, tokenizer = build_tiny_qwen3(tmp_path / "models")
    assert (tmp_path / "models" / "tiny-qwen3" / "config.json").is_file()
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=24, temperature=1.0, seed=0)
    record = load_task(demo_store, "issue_tracker", 0)
    episode = run_episode(demo_pool, policy, EpisodeSpec("issue_tracker", 0, record.task),
                          LoopConfig(snapshot_dir=tmp_path))
    # Random weights never write a well-formed turn: the first step is a format error, scored -1.
    assert episode.termination == "format_error" and episode.turns == 1
    step = episode.steps[0]
    assert step.prompt_tokens > 50 and 0 < step.completion_tokens <= 24
    assert step.response and step.format["ok"] is False and step.format["rule"] in ("response_too_long", "reasoning")
    assert score_episode(episode).reward == -1.0
    # The cached model loads back with the same weights.
    again, _ = build_tiny_qwen3(tmp_path / "models")
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))


def test_rollout_cli_writes_trajectory_databases_and_verdict(demo_store, tmp_path, capsys):
    out = tmp_path / "rollout"
    code = rollout_main(["--scenario", "music_playlists", "--task", "1", "--store", str(demo_store.root),
                         "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outcome"] == "completed" and summary["reward"] == 1.0
    for name in ("trajectory.json", "verdict.json", "initial.db", "final.db"):
        assert (out / name).is_file(), name
    trajectory = json.loads((out / "trajectory.json").read_text())
    assert trajectory["final_db"] == str(out / "final.db") and trajectory["steps"][0]["format"]["action"] == "list_tools"
    assert json.loads((out / "verdict.json").read_text())["judge"]["classification"] == "Completed"
    assert (out / "final.db").read_bytes() != (out / "initial.db").read_bytes()


def test_rollout_cli_rejects_bad_input(demo_store, capsys):
    assert rollout_main(["--scenario", "issue_tracker", "--task", "99", "--store", str(demo_store.root)]) == 2
    assert "task 99 does not exist" in capsys.readouterr().err
    assert rollout_main(["--scenario", "issue_tracker", "--task", "0", "--store", str(demo_store.root),
                         "--policy", "gpt"]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_chat_model_policy_through_the_llm_client(demo_store, demo_pool, reference, tmp_path):
    """A litellm-style chat policy via the real LLMClient, answering from recorded turns (replay)."""
    from awm_resources.llm import LLMClient
    from awm_rl.agent import ChatModelPolicy

    turns = reference.scripts[("restaurant_reservations", 2)]
    for i, text in enumerate(turns):
        path = tmp_path / "replay" / "restaurant_reservations" / f"rollout.t2.turn{i}.1.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    policy = ChatModelPolicy(LLMClient("replay", replay_dir=tmp_path / "replay"))
    record = load_task(demo_store, "restaurant_reservations", 2)
    episode = run_episode(demo_pool, policy, EpisodeSpec("restaurant_reservations", 2, record.task),
                          LoopConfig(snapshot_dir=tmp_path))
    assert episode.policy == "chat:replay" and episode.steps[0].prompt_tokens > 0
    assert score_episode(episode, Judge("code").judge(episode, record)).outcome == "completed"
    # A turn with no recording is a policy failure: the episode stops and scores 0.
    (tmp_path / "replay" / "restaurant_reservations" / "rollout.t2.turn1.1.md").unlink()
    broken = run_episode(demo_pool, policy, EpisodeSpec("restaurant_reservations", 2, record.task),
                         LoopConfig(snapshot_dir=tmp_path))
    assert broken.termination == "policy_error" and "no recorded answer" in broken.termination_detail
    assert score_episode(broken).reward == 0.0
