"""A strong model as the agent, served as providers serve it: its recorded answers on two AgentWorldModel-1K
environments the project never synthesized (../shared/real-model-agent) complete the episodes they completed,
judged by the environments' own verifiers, whatever shape the provider gives the answer (`<think>` in the content,
reasoning split off into `reasoning_content` or `reasoning`, hidden reasoning, native `tool_calls`); and every
configuration error (no key, a refused key, an unknown model) is one clear error at once, never retried."""

from __future__ import annotations

import time

import pytest

from awm_rl.agent import EpisodeSpec, LoopConfig, make_policy, parse_response, run_episode
from awm_rl.agent.policies import PolicyConfigError
from tests.conftest import REAL_AGENT_DIR, agent_store_copy
from tests.llm_conformance.fake_servers import FakeLLMServer, Fault

RECORDINGS = REAL_AGENT_DIR / "recordings"
# The README's table: (scenario, task, turns), each completed under the code-mode verifier.
EPISODES = [("banking_fintech_2", 0, 7), ("banking_fintech_2", 3, 5), ("crowdfunding_platform_1", 1, 4)]


@pytest.fixture(scope="module")
def agent_store(agent_awm1k, tmp_path_factory):
    return agent_store_copy(agent_awm1k, tmp_path_factory.mktemp("agent_models_store"))


@pytest.fixture(scope="module")
def pool(agent_store, ray_address):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(agent_store.root, num_hosts=1, prefetch=0) as p:
        yield p


@pytest.fixture()
def no_provider_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWM_POLICY_API_KEY", "AWM_POLICY_API_BASE"):
        monkeypatch.delenv(name, raising=False)


def _judged(store, episode):
    from awm_rl.reward import Judge, load_task, needs_judge, score_episode

    verdict = Judge("code").judge(episode, load_task(store, episode.scenario, episode.task_idx)) \
        if needs_judge(episode) else None
    return score_episode(episode, verdict)


def _run(store, pool, policy, scenario: str, task: int, tmp_path):
    from awm_rl.reward import load_task

    spec = EpisodeSpec(scenario, task, load_task(store, scenario, task).task)
    return run_episode(pool, policy, spec, LoopConfig(snapshot_dir=tmp_path))


@pytest.mark.parametrize("shape, model, tool_calling, episodes", [
    ("content", "openai/gpt-5", "text", EPISODES),                  # the answer as recorded
    ("reasoning_content", "hosted_vllm/Qwen/Qwen3-8B", "text", EPISODES[:1]),  # vLLM's reasoning parser; litellm
    ("reasoning", "openai/gpt-4.1", "text", EPISODES[2:]),          # newer vLLM servers' field
    ("hidden", "openai/gpt-5", "text", EPISODES[1:2]),              # a hosted reasoning model: no reasoning returned
    ("native", "openai/gpt-5", "native", EPISODES),                 # the provider's function calling
])
def test_recorded_episodes_complete_in_every_provider_shape(agent_store, pool, tmp_path, no_provider_keys, shape,
                                                            model, tool_calling, episodes):
    server = FakeLLMServer(RECORDINGS, shape=shape).start()
    try:
        policy = make_policy(f"chat:{model}", api_base=f"{server.url}/v1", api_key="sk-loopback",
                             tool_calling=tool_calling)
        for scenario, task, turns in episodes:
            episode = _run(agent_store, pool, policy, scenario, task, tmp_path)
            score = _judged(agent_store, episode)
            assert (episode.termination, score.outcome, episode.turns) == ("final_answer", "completed", turns), (
                scenario, task, episode.termination_detail, score.reasons)
            assert episode.reasoning_rule == policy.reasoning
            for step in episode.steps:  # every turn in the one Qwen3 wire form, the reasoning kept where returned
                parsed = parse_response(step.response)
                assert step.format["ok"] and len(parsed.calls) <= 1
                assert (parsed.reasoning is None) == (shape == "hidden"), step.response[:200]
    finally:
        server.stop()
    if shape == "native":
        body = server.requests[-1].body
        assert [t["function"]["name"] for t in body["tools"]] == ["list_tools", "call_tool"]
        calls = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert calls and answered == calls  # every call answered by its own tool message, in order
        assert not any("<think>" in str(m.get("content")) for m in body["messages"] if m["role"] == "assistant")


def test_hidden_reasoning_fails_the_papers_rule_and_passes_when_optional(agent_store, pool, tmp_path, no_provider_keys):
    """A model that returns no reasoning under the paper's rule loses turn 0 on format, with the reason named;
    the same answers with the rule set to optional complete, and the episode records which rule held."""
    server = FakeLLMServer(RECORDINGS, shape="hidden").start()
    try:
        strict = make_policy("chat:hosted_vllm/Qwen/Qwen3-8B", api_base=f"{server.url}/v1")
        assert strict.reasoning == "required"
        failed = _run(agent_store, pool, strict, "crowdfunding_platform_1", 1, tmp_path)
        assert (failed.termination, failed.format_rule, failed.turns) == ("format_error", "reasoning", 1)
        assert "optional" in failed.termination_detail
        lenient = make_policy("chat:hosted_vllm/Qwen/Qwen3-8B", api_base=f"{server.url}/v1", reasoning="optional")
        done = _run(agent_store, pool, lenient, "crowdfunding_platform_1", 1, tmp_path)
        assert (done.termination, _judged(agent_store, done).outcome, done.reasoning_rule) == (
            "final_answer", "completed", "optional")
    finally:
        server.stop()


def test_a_missing_key_is_one_clear_error_at_once(agent_store, pool, tmp_path, no_provider_keys):
    server = FakeLLMServer(RECORDINGS).start()
    try:
        policy = make_policy("chat:openai/gpt-5", api_base=f"{server.url}/v1")
        started = time.perf_counter()
        with pytest.raises(PolicyConfigError) as caught:
            _run(agent_store, pool, policy, "banking_fintech_2", 0, tmp_path)
        assert time.perf_counter() - started < 5  # no transient retries (they back off 2+4+8+16 s)
        message = str(caught.value)
        for expected in ("openai/gpt-5", server.url, "OPENAI_API_KEY", "--api-key", "AWM_POLICY_API_KEY"):
            assert expected in message, (expected, message)
        assert not server.requests  # the client knew before sending anything
    finally:
        server.stop()


@pytest.mark.parametrize("status, reason", [(401, "refused the credentials"), (403, "refused the credentials"),
                                            (404, "does not exist")])
def test_refused_keys_and_unknown_models_are_not_retried(agent_store, pool, tmp_path, no_provider_keys, status, reason):
    server = FakeLLMServer(RECORDINGS).start()
    try:
        server.faults.append(Fault(status=status))
        policy = make_policy("chat:openai/gpt-4.1", api_base=f"{server.url}/v1", api_key="sk-wrong")
        with pytest.raises(PolicyConfigError, match=reason):
            _run(agent_store, pool, policy, "banking_fintech_2", 3, tmp_path)
        assert len(server.requests) == 1
    finally:
        server.stop()


def test_the_policy_key_setting_and_the_rollout_command(agent_store, pool, tmp_path, no_provider_keys, monkeypatch,
                                                        capsys):
    """AWM_POLICY_API_KEY reaches the wire; `awm rollout` without any key exits 2 with the one error, and with the
    key runs the recorded episode to completion and reports the reasoning rule it applied."""
    from awm_rl.evaluation.commands import rollout_main

    server = FakeLLMServer(RECORDINGS, shape="reasoning_content").start()
    try:
        argv = ["--scenario", "crowdfunding_platform_1", "--task", "1", "--policy", "chat:openai/gpt-5",
                "--api-base", f"{server.url}/v1", "--store", str(agent_store.root), "--json"]
        assert rollout_main(argv + ["--out", str(tmp_path / "no-key")]) == 2
        assert "OPENAI_API_KEY" in capsys.readouterr().err and not server.requests
        monkeypatch.setenv("AWM_POLICY_API_KEY", "sk-from-setting")
        assert rollout_main(argv + ["--out", str(tmp_path / "with-key")]) == 0
        import json

        summary = json.loads(capsys.readouterr().out)
        assert (summary["outcome"], summary["turns"], summary["reasoning_rule"]) == ("completed", 4, "optional")
        assert {r.headers.get("authorization") for r in server.requests} == {"Bearer sk-from-setting"}
    finally:
        server.stop()
