"""LLM resource: JSON extraction, replay, cache, cost accounting, transport retries (litellm's own mock)."""

from __future__ import annotations

import pytest

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
from awm_assets.synthesis.models import TaskList


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
    import litellm

    client = LLMClient("openai/gpt-4o-mini", api_key="sk-test", transport_retries=2, backoff_s=0.01)
    timeout = litellm.Timeout(message="upstream too slow", model="gpt-4o-mini", llm_provider="openai")
    with pytest.raises(LLMError) as err:
        client.chat([{"role": "user", "content": "x"}], tag=CallTag("tasks", "s"), mock_response=timeout)
    assert "after 3 tries" in str(err.value) and "'tasks'" in str(err.value)
