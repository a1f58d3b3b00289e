"""Single calls through real litellm over HTTP to loopback servers, one per provider family; the tests
assert on the parameters that actually arrived (the provider adaptation in awm_resources.llm)."""

from __future__ import annotations

import pytest

from awm_assets.synthesis.models import TaskList
from awm_resources.llm import CALL_HEADER, CallTag, LLMClient
from tests.llm_conformance.conftest import RECORDINGS, api_base_for

MESSAGES = [{"role": "system", "content": "You write tasks for a synthetic environment. Answer in JSON."},
            {"role": "user", "content": "Write 10 tasks for the Issue Tracker scenario."}]
TAG = CallTag("tasks", "issue_tracker")
RECORDED = (RECORDINGS / "issue_tracker" / "tasks.1.md").read_text(encoding="utf-8")


def _only(server):
    assert len(server.requests) == 1, [r.path for r in server.requests]
    return server.requests[0]


@pytest.mark.parametrize("model, wire_model, limit_key, limit", [
    ("openai/gpt-5", "gpt-5", "max_completion_tokens", 128_000),
    ("openai/o3", "o3", "max_completion_tokens", 100_000),
])
def test_openai_reasoning_models_get_no_temperature_and_max_completion_tokens(llm_server, make_client, model,
                                                                               wire_model, limit_key, limit):
    client = make_client(model, temperature=0.7, reasoning_effort="high")
    tasks, response = client.chat_json(MESSAGES, TaskList, tag=TAG)
    assert len(tasks.tasks) == 10 and response.finish_reason == "stop" and response.prompt_tokens > 0
    req = _only(llm_server)
    assert req.path == "/v1/chat/completions" and req.body["model"] == wire_model
    assert "temperature" not in req.body  # gpt-5 / o-series reject anything but 1
    assert req.body[limit_key] == limit and "max_tokens" not in req.body  # litellm's max_output_tokens
    assert req.body["reasoning_effort"] == "high"
    fmt = req.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "TaskList"
    assert fmt["json_schema"]["schema"]["properties"]["tasks"]["type"] == "array"
    assert req.headers[CALL_HEADER.lower()] == "issue_tracker/tasks.1.md"
    assert req.headers["authorization"] == "Bearer sk-test"


def test_openai_gpt41_gets_temperature_and_max_tokens_but_no_reasoning_effort(llm_server, make_client):
    client = make_client("openai/gpt-4.1", temperature=0.7, reasoning_effort="high")
    response = client.chat(MESSAGES, tag=TAG)
    assert response.text == RECORDED and response.cost_usd > 0  # priced from litellm's local cost map
    body = _only(llm_server).body
    assert body["temperature"] == 0.7 and body["max_tokens"] == 32_768
    assert "reasoning_effort" not in body and "max_completion_tokens" not in body and "response_format" not in body
    assert body["messages"][0] == MESSAGES[0]  # the system prompt stays a system message


def test_hosted_vllm_unknown_model_uses_the_tolerant_extractor(llm_server, make_client):
    """litellm knows nothing about a self-hosted model: no output limit (the server's own), no JSON
    schema (not known to be supported), and the prose-plus-fence answer is still parsed."""
    client = make_client("hosted_vllm/Qwen/Qwen3-8B", temperature=0.6, reasoning_effort="high")
    tasks, response = client.chat_json(MESSAGES, TaskList, tag=TAG)
    assert len(tasks.tasks) == 10 and response.text == RECORDED and response.cost_usd == 0.0
    req = _only(llm_server)
    assert req.path == "/v1/chat/completions" and req.body["model"] == "Qwen/Qwen3-8B"
    assert req.body["temperature"] == 0.6
    for absent in ("max_tokens", "max_completion_tokens", "reasoning_effort", "response_format"):
        assert absent not in req.body, absent
    assert req.headers[CALL_HEADER.lower()] == "issue_tracker/tasks.1.md"


def test_hosted_vllm_with_a_configured_limit(llm_server, make_client):
    make_client("hosted_vllm/my-model", max_tokens=4096).chat(MESSAGES, tag=TAG)
    assert _only(llm_server).body["max_tokens"] == 4096


def test_anthropic_messages_protocol(llm_server, make_client):
    client = make_client("anthropic/claude-sonnet-4-5", temperature=0.7)
    tasks, response = client.chat_json(MESSAGES, TaskList, tag=TAG)
    assert len(tasks.tasks) == 10 and response.finish_reason == "stop" and response.cost_usd > 0
    req = _only(llm_server)
    assert req.path == "/v1/messages" and req.body["model"] == "claude-sonnet-4-5"
    assert req.body["max_tokens"] == 64_000 and req.body["temperature"] == 0.7
    # The system prompt travels in the top-level `system` field, never as a message.
    assert [b["text"] for b in req.body["system"]] == [MESSAGES[0]["content"]]
    assert [m["role"] for m in req.body["messages"]] == ["user"]
    assert "thinking" not in req.body
    assert req.body["output_format"]["type"] == "json_schema"  # native structured output
    assert req.headers["x-api-key"] == "sk-test" and req.headers["anthropic-version"]
    assert req.headers[CALL_HEADER.lower()] == "issue_tracker/tasks.1.md"


def test_anthropic_reasoning_effort_becomes_thinking_without_temperature(llm_server, make_client):
    client = make_client("anthropic/claude-sonnet-4-5", temperature=0.7, reasoning_effort="low")
    assert client.chat(MESSAGES, tag=TAG).text == RECORDED
    body = _only(llm_server).body
    assert body["thinking"]["type"] == "enabled" and body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert "temperature" not in body  # extended thinking accepts only the default temperature


def test_per_call_params_are_adapted_too(llm_server, make_client):
    """A caller's own temperature / max_tokens (the rollout policy passes both) are adapted like the config's."""
    make_client("openai/gpt-5").chat(MESSAGES, tag=TAG, temperature=0.2, max_tokens=2048)
    body = _only(llm_server).body
    assert "temperature" not in body and body["max_completion_tokens"] == 2048 and "max_tokens" not in body


def test_each_stage_uses_its_own_model(llm_server, make_client):
    """A cheap self-hosted model for classification, the default reasoning model with a raised effort for code."""
    client = make_client("openai/gpt-5", reasoning_effort="low", stages={
        "classify": {"model": "hosted_vllm/small-classifier", "api_base": f"{llm_server.url}/v1", "max_tokens": 512},
        "env_code": {"reasoning_effort": "high", "max_tokens": 100_000},
    })
    client.chat(MESSAGES, tag=CallTag("classify", "_batch_demo"))
    client.chat(MESSAGES, tag=CallTag("env_code", "music_playlists", attempt=2))
    client.chat(MESSAGES, tag=TAG)
    classify, env_code, tasks = (r.body for r in llm_server.requests)
    assert classify["model"] == "small-classifier" and classify["max_tokens"] == 512 and "reasoning_effort" not in classify
    assert env_code["model"] == "gpt-5" and env_code["reasoning_effort"] == "high"
    assert env_code["max_completion_tokens"] == 100_000
    assert tasks["model"] == "gpt-5" and tasks["reasoning_effort"] == "low" and tasks["max_completion_tokens"] == 128_000
    assert [r.headers[CALL_HEADER.lower()] for r in llm_server.requests] == [
        "_batch_demo/classify.1.md", "music_playlists/env_code.2.md", "issue_tracker/tasks.1.md"]
    assert client.model_for("classify") == "hosted_vllm/small-classifier" and client.model_for("tasks") == "openai/gpt-5"


def test_a_stage_on_another_provider_does_not_inherit_the_default_key(llm_server, make_client):
    client = make_client("openai/gpt-5", api_key="sk-openai", stages={"classify": {"model": "anthropic/claude-sonnet-4-5",
                                                                                   "api_base": llm_server.url}})
    resolved = client.resolve("classify")
    assert resolved.api_key is None and resolved.api_base == llm_server.url
    assert client.resolve("tasks").api_key == "sk-openai"


def test_cache_key_includes_the_adapted_params(llm_server, tmp_path):
    cache = tmp_path / "cache.sqlite"
    base = dict(api_base=api_base_for(llm_server, "openai/gpt-5"), api_key="sk-test", cache_path=cache)
    first = LLMClient("openai/gpt-5", reasoning_effort="low", **base).chat(MESSAGES, tag=TAG)
    again = LLMClient("openai/gpt-5", reasoning_effort="low", **base).chat(MESSAGES, tag=TAG)
    assert not first.cached and again.cached and again.text == first.text and again.cost_usd == 0
    assert len(llm_server.requests) == 1
    LLMClient("openai/gpt-5", reasoning_effort="high", **base).chat(MESSAGES, tag=TAG)
    LLMClient("openai/gpt-5", reasoning_effort="low", **base).chat_json(MESSAGES, TaskList, tag=TAG)  # + response_format
    assert len(llm_server.requests) == 3


def test_recording_a_real_run_writes_the_replay_layout(llm_server, make_client, tmp_path):
    client = make_client("openai/gpt-5", record_dir=tmp_path / "rec")
    client.chat(MESSAGES, tag=CallTag("verifiers", "issue_tracker", item="task_4", attempt=2))
    assert (tmp_path / "rec" / "issue_tracker" / "verifiers.task_4.2.md").read_text() == \
        (RECORDINGS / "issue_tracker" / "verifiers.task_4.2.md").read_text()
    usage = client.usage(stage="verifiers", scenario="issue_tracker")
    assert usage["llm_calls"] == 1 and usage["completion_tokens"] > 0
