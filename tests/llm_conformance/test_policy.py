"""The rollout policy over real HTTP: a turn cut at the generation limit is the agent's turn, marked
"length" for the format check, not a policy failure; a server that keeps failing is a PolicyError."""

from __future__ import annotations

import pytest

from awm_rl.agent.policies import ChatModelPolicy, PolicyError, PolicyRequest
from tests.llm_conformance.fake_servers import FakeLLMServer, Fault

ANSWER = "<think>I list the projects first.</think>\n<tool_call>\n{\"name\": \"list_projects\", \"arguments\": {}}\n</tool_call>"
REQUEST = PolicyRequest(messages=[{"role": "user", "content": "How many projects do I own?"}], scenario="demo",
                        task_idx=0, turn=0)


@pytest.fixture()
def server(tmp_path):
    fake = FakeLLMServer(tmp_path, default_answer=ANSWER).start()
    yield fake
    fake.stop()


@pytest.mark.parametrize("model", ["openai/gpt-4.1", "hosted_vllm/Qwen/Qwen3-8B"])
def test_a_cut_turn_is_returned_as_length(server, model):
    from awm_resources.llm import LLMClient

    policy = ChatModelPolicy(LLMClient(model, api_base=f"{server.url}/v1", api_key="sk-test", backoff_s=0.01),
                             max_tokens=64)
    assert policy.generate(REQUEST).finish_reason == "stop"
    server.faults.append(Fault(truncate=True))
    cut = policy.generate(REQUEST)
    assert cut.finish_reason == "length" and cut.text
    assert server.requests[-1].body.get("max_tokens") == 64


def test_a_failing_server_is_a_policy_error(server):
    from awm_resources.llm import LLMClient

    policy = ChatModelPolicy(LLMClient("openai/gpt-4.1", api_base=f"{server.url}/v1", api_key="sk-test",
                                       backoff_s=0.01, transport_retries=1))
    server.faults.extend([Fault(status=500), Fault(status=500)])
    with pytest.raises(PolicyError, match="after 2 tries"):
        policy.generate(REQUEST)


@pytest.mark.parametrize("model, wire", [("openai/gpt-4.1", {"top_p": 0.95}),
                                         ("hosted_vllm/Qwen/Qwen3-8B", {"top_p": 0.95, "top_k": 20})])
def test_evaluation_decoding_reaches_the_wire(server, model, wire):
    """The paper's evaluation sampling (temperature 0.6, top-p 0.95, top-k 20) as each provider takes it."""
    from awm_rl.agent.policies import make_policy

    policy = make_policy(f"chat:{model}", api_base=f"{server.url}/v1", api_key="sk-test", temperature=0.6,
                         top_p=0.95, top_k=20, max_new_tokens=64)
    policy.generate(REQUEST)
    body = server.requests[-1].body
    assert body["temperature"] == 0.6 and {k: body.get(k) for k in wire} == wire
    assert ("top_k" in body) == ("top_k" in wire)


def test_chat_options_on_other_policies_are_errors():
    """An endpoint, a key or native tool calling given to a policy that has no use for them is said, not ignored."""
    from awm_rl.agent.policies import make_policy

    with pytest.raises(ValueError, match="applies to chat:<model> policies; a reference policy would ignore it"):
        make_policy("reference", api_key="sk-test")
    with pytest.raises(ValueError, match="needs a chat:<model> policy"):
        make_policy("reference", tool_calling="native")
    assert make_policy("reference", reasoning="optional").reasoning == "optional"  # the rule applies to every policy
