"""LLM resource: JSON extraction, replay, cache, cost accounting, transport retries (litellm's own mock), provider
adaptation from litellm's model information, per-stage settings. Over-HTTP conformance: tests/llm_conformance."""

from __future__ import annotations

import pytest

from awm_assets.synthesis.models import TaskList
from awm_resources.llm import (
    CallTag,
    LLMClient,
    LLMError,
    LLMOutputError,
    ReplayMissingError,
    extract_code,
    extract_json,
    parse_model,
)


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('Sure, here it is:\n```json\n{"a": [1, 2]}\n```\nAnything else?', {"a": [1, 2]}),
    ('```\n{"a": "x"}\n```', {"a": "x"}),
    ('The answer is {"a": "brace } inside", "b": {"c": "quote \\" inside"}} as requested.',
     {"a": "brace } inside", "b": {"c": 'quote " inside'}}),
    ('[1, 2, 3]', [1, 2, 3]),
])
def test_extract_json_tolerates_fences_and_prose(text, expected):
    assert extract_json(text) == expected


def test_extract_json_error_quotes_the_output():
    with pytest.raises(LLMOutputError) as err:
        extract_json('I could not do it, sorry: {"tasks": [1, 2')
    assert "no valid JSON" in str(err.value)
    assert '{"tasks": [1, 2' in str(err.value)


def test_parse_model_names_the_field_and_quotes_output():
    with pytest.raises(LLMOutputError) as err:
        parse_model('```json\n{"tasks": "not a list"}\n```', TaskList)
    msg = str(err.value)
    assert "TaskList" in msg and "tasks" in msg and "not a list" in msg


def test_extract_code_prefers_longest_python_block():
    text = "Here:\n```bash\npip install x\n```\n```python\nimport os\nx = 1\n```\n"
    assert extract_code(text) == "import os\nx = 1\n"
    with pytest.raises(LLMOutputError):
        extract_code("```python\n```")


def test_replay_answers_from_recordings_and_names_missing_ones(tmp_path):
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "tasks.2.md").write_text('{"tasks": ["a"]}')
    (tmp_path / "shop" / "verifiers.task_3.1.md").write_text("code")
    client = LLMClient("replay", replay_dir=tmp_path)
    msgs = [{"role": "user", "content": "x" * 400}]
    r = client.chat(msgs, tag=CallTag("tasks", "shop", attempt=2))
    assert r.text == '{"tasks": ["a"]}' and r.tokens_estimated and r.prompt_tokens == 100
    assert client.chat(msgs, tag=CallTag("verifiers", "shop", item="task_3")).text == "code"
    with pytest.raises(ReplayMissingError) as err:
        client.chat(msgs, tag=CallTag("db_schema", "shop", attempt=1))
    assert "'db_schema'" in str(err.value) and "'shop'" in str(err.value) and "db_schema.1.md" in str(err.value)
    assert client.usage(stage="tasks")["llm_calls"] == 1


def test_litellm_calls_are_cached_and_costed(tmp_path):
    client = LLMClient("openai/gpt-4o-mini", api_key="sk-test", cache_path=tmp_path / "cache.sqlite")
    msgs = [{"role": "user", "content": "give me json"}]
    first = client.chat(msgs, tag=CallTag("tasks", "s"), mock_response='{"ok": true}')
    assert first.text == '{"ok": true}' and not first.cached and first.prompt_tokens > 0
    assert first.cost_usd > 0
    again = LLMClient("openai/gpt-4o-mini", api_key="sk-test", cache_path=tmp_path / "cache.sqlite")
    second = again.chat(msgs, tag=CallTag("tasks", "s"), mock_response='{"ok": true}')
    assert second.cached and second.text == first.text and second.cost_usd == 0
    usage = client.usage(stage="tasks", scenario="s")
    assert usage["llm_calls"] == 1 and usage["cost_usd"] == pytest.approx(first.cost_usd)


def test_transport_errors_are_retried_then_reported(tmp_path):
    from awm_resources.llm import _litellm

    litellm = _litellm()  # imported with the offline settings (no cost-map fetch)

    client = LLMClient("openai/gpt-4o-mini", api_key="sk-test", transport_retries=2, backoff_s=0.01)
    timeout = litellm.Timeout(message="upstream too slow", model="gpt-4o-mini", llm_provider="openai")
    with pytest.raises(LLMError) as err:
        client.chat([{"role": "user", "content": "x"}], tag=CallTag("tasks", "s"), mock_response=timeout)
    assert "after 3 tries" in str(err.value) and "'tasks'" in str(err.value)


# -- provider adaptation (litellm's model information, no network) -----------------------------------
def _adapt(model, **kw):
    from awm_resources.llm import adapt_params, model_profile

    kw.setdefault("temperature", 0.7)
    kw.setdefault("max_tokens", None)
    kw.setdefault("reasoning_effort", None)
    return adapt_params(model_profile(model), **kw)


def test_adaptation_follows_litellm_model_information():
    assert _adapt("openai/gpt-5") == {"max_completion_tokens": 128_000}
    assert _adapt("openai/o3", reasoning_effort="low", max_tokens=5000) == {"max_completion_tokens": 5000,
                                                                           "reasoning_effort": "low"}
    assert _adapt("openai/gpt-4.1", reasoning_effort="high") == {"temperature": 0.7, "max_tokens": 32_768}
    assert _adapt("anthropic/claude-sonnet-4-5") == {"temperature": 0.7, "max_tokens": 64_000}
    assert _adapt("anthropic/claude-sonnet-4-5", reasoning_effort="medium") == {"max_tokens": 64_000,
                                                                               "reasoning_effort": "medium"}
    assert _adapt("hosted_vllm/some/model", reasoning_effort="high") == {"temperature": 0.7}
    assert _adapt("openai/gpt-4.1", temperature=None, response_model=TaskList)["response_format"]["json_schema"]["name"] == "TaskList"
    assert "response_format" not in _adapt("hosted_vllm/some/model", response_model=TaskList)


def test_retry_after_header_forms():
    import email.utils
    import time

    from awm_resources.llm import retry_after_s

    class Exc(Exception):
        def __init__(self, headers):
            self.litellm_response_headers = headers

    assert retry_after_s(Exc({"Retry-After": "7"})) == 7.0
    assert retry_after_s(Exc({"retry-after-ms": "250", "retry-after": "1"})) == 0.25
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_s(Exc({"Retry-After": date})) <= 31
    assert retry_after_s(Exc({})) is None and retry_after_s(Exc({"Retry-After": "soon"})) is None
    assert retry_after_s(ValueError("no headers")) is None


def test_stage_settings_from_env_and_validation():
    from awm_resources.llm import stage_settings_from_env

    env = {"AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_MAX_TOKENS": "9", "AWM_LLM_API_KEY": "k",
           "AWM_LLM_MODEL_CLASSIFY": "openai/gpt-5-mini", "AWM_LLM_MAX_TOKENS_ENV_CODE": "100000",
           "AWM_LLM_REASONING_EFFORT_ENV_CODE": "high", "AWM_LLM_API_BASE_CLASSIFY": "http://127.0.0.1:1/v1"}
    assert stage_settings_from_env(env) == {
        "classify": {"model": "openai/gpt-5-mini", "api_base": "http://127.0.0.1:1/v1"},
        "env_code": {"max_tokens": 100_000, "reasoning_effort": "high"}}
    with pytest.raises(ValueError, match="AWM_LLM_MAX_TOKENS_TASKS must be an integer, got 'lots'"):
        stage_settings_from_env({"AWM_LLM_MAX_TOKENS_TASKS": "lots"})
    with pytest.raises(ValueError, match="stage 'tasks': unknown keys \\['modle'\\]"):
        LLMClient("openai/gpt-5", stages={"tasks": {"modle": "x"}})


def test_replay_per_stage_and_resource_config(tmp_path):
    """A replayed default with one real stage: the replayed stages never touch litellm."""
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "tasks.1.md").write_text('{"tasks": ["a"]}')
    client = LLMClient("replay", replay_dir=tmp_path, stages={"classify": {"model": "openai/gpt-5-mini"}},
                       cache_path=tmp_path / "c.sqlite")
    out, _ = client.chat_json([{"role": "user", "content": "x"}], TaskList, tag=CallTag("tasks", "shop"))
    assert out.tasks == ["a"] and client.cache is not None
    assert client.model_for("classify") == "openai/gpt-5-mini" and client.model_for("tasks") == "replay"


def test_llm_resource_reads_reasoning_effort_limit_and_stage_models_from_env(monkeypatch):
    import dagster as dg

    from awm_assets.defs.shared.resources import build_resources

    monkeypatch.setenv("AWM_LLM_MODEL", "openai/gpt-5")
    monkeypatch.setenv("AWM_LLM_REASONING_EFFORT", "high")
    monkeypatch.setenv("AWM_LLM_MAX_TOKENS", "64000")
    monkeypatch.setenv("AWM_LLM_MODEL_CLASSIFY", "openai/gpt-5-mini")
    seen = {}

    @dg.asset(required_resource_keys={"llm"})
    def probe(context):
        client = context.resources.llm.get_client()
        seen.update(effort=client.reasoning_effort, limit=client.max_tokens, classify=client.model_for("classify"),
                    tasks=client.model_for("tasks"), params=client.call_params("tasks")[1])

    assert dg.materialize([probe], resources={"llm": build_resources()["llm"]}).success
    assert seen == {"effort": "high", "limit": 64_000, "classify": "openai/gpt-5-mini", "tasks": "openai/gpt-5",
                    "params": {"max_completion_tokens": 64_000, "reasoning_effort": "high"}}
