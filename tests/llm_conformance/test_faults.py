"""Transport faults and truncated answers over real HTTP, each handled as awm_resources.llm documents:
429 waits as its Retry-After asks (bounded), 5xx and timeouts are retried with backoff and then reported
as LLMError naming the call, a truncated answer raises LLMTruncatedError (retryable by the stage's
self-correction) and is never cached."""

from __future__ import annotations

import pytest

from awm_resources.llm import CallTag, LLMError, LLMOutputError, LLMTruncatedError
from tests.llm_conformance.fake_servers import Fault

MESSAGES = [{"role": "user", "content": "Write the database schema."}]
TAG = CallTag("db_schema", "issue_tracker", attempt=2)
PROVIDERS = ["openai/gpt-5", "hosted_vllm/Qwen/Qwen3-8B", "anthropic/claude-sonnet-4-5"]


@pytest.mark.parametrize("model", PROVIDERS)
def test_429_waits_as_retry_after_asks_then_succeeds(llm_server, make_client, model):
    # A backoff far longer than the header's wait: finishing in time proves the header was honoured.
    client = make_client(model, backoff_s=5.0)
    llm_server.faults.append(Fault(status=429, headers={"Retry-After": "1"}))
    response = client.chat(MESSAGES, tag=TAG)
    assert response.finish_reason == "stop" and response.text
    assert len(llm_server.requests) == 2
    assert 0.95 <= llm_server.requests[1].at - llm_server.requests[0].at < 3.0


def test_retry_after_ms_and_the_bound(llm_server, make_client):
    client = make_client("openai/gpt-4.1", backoff_s=5.0, max_retry_after_s=0.2)
    llm_server.faults.extend([Fault(status=429, headers={"retry-after-ms": "150"}),
                              Fault(status=429, headers={"Retry-After": "3600"})])  # capped at 0.2 s
    client.chat(MESSAGES, tag=TAG)
    reqs = llm_server.requests
    assert len(reqs) == 3
    assert 0.14 <= reqs[1].at - reqs[0].at < 1.0 and 0.19 <= reqs[2].at - reqs[1].at < 1.0


@pytest.mark.parametrize("model", ["openai/gpt-5", "anthropic/claude-sonnet-4-5"])
def test_500_is_retried_with_backoff_then_succeeds(llm_server, make_client, model):
    client = make_client(model, backoff_s=0.05, transport_retries=3)
    llm_server.faults.extend([Fault(status=500), Fault(status=503)])
    assert client.chat(MESSAGES, tag=TAG).finish_reason == "stop"
    reqs = llm_server.requests
    assert len(reqs) == 3
    assert reqs[1].at - reqs[0].at >= 0.05 and reqs[2].at - reqs[1].at >= 0.1  # exponential
    assert client.usage()["llm_calls"] == 1


@pytest.mark.parametrize("model", ["openai/gpt-5", "anthropic/claude-sonnet-4-5"])
def test_500_exhausted_raises_llm_error_naming_the_call(llm_server, make_client, model):
    client = make_client(model, transport_retries=2)
    llm_server.faults.extend([Fault(status=500)] * 3)
    with pytest.raises(LLMError) as err:
        client.chat(MESSAGES, tag=TAG)
    msg = str(err.value)
    assert "after 3 tries" in msg and "'db_schema'" in msg and "'issue_tracker'" in msg and "attempt 2" in msg
    assert "InternalServerError" in msg and model in msg
    assert len(llm_server.requests) == 3 and client.usage()["llm_calls"] == 0


@pytest.mark.parametrize("model", ["openai/gpt-5", "hosted_vllm/Qwen/Qwen3-8B", "anthropic/claude-sonnet-4-5"])
def test_timeout_is_retried_then_reported(llm_server, make_client, model):
    client = make_client(model, timeout_s=0.3, transport_retries=1)
    llm_server.faults.extend([Fault(sleep_s=1.0)] * 2)
    with pytest.raises(LLMError) as err:
        client.chat(MESSAGES, tag=TAG)
    assert "Timeout" in str(err.value) and "after 2 tries" in str(err.value) and "'db_schema'" in str(err.value)
    reqs = llm_server.requests
    assert len(reqs) == 2 and reqs[1].at - reqs[0].at < 1.0  # the client gave up before the server answered


def test_timeout_then_success(llm_server, make_client):
    client = make_client("openai/o3", timeout_s=0.3, transport_retries=2)
    llm_server.faults.append(Fault(sleep_s=1.0))
    assert client.chat(MESSAGES, tag=TAG).finish_reason == "stop" and len(llm_server.requests) == 2


@pytest.mark.parametrize("model", PROVIDERS)
def test_truncated_answer_raises_a_retryable_error_naming_the_call(llm_server, make_client, tmp_path, model):
    """finish_reason "length" (Anthropic: stop_reason "max_tokens"): LLMTruncatedError, an LLMOutputError,
    so the stage records a failed attempt and self-corrects; the cut answer is not cached."""
    client = make_client(model, cache_path=tmp_path / "cache.sqlite", max_tokens=1000)
    llm_server.faults.append(Fault(truncate=True))
    with pytest.raises(LLMTruncatedError) as err:
        client.chat(MESSAGES, tag=TAG)
    assert isinstance(err.value, LLMOutputError) and isinstance(err.value, LLMError)
    msg = str(err.value)
    assert "cut off" in msg and "stage 'db_schema', scenario 'issue_tracker', attempt 2" in msg
    assert "=1000" in msg and "AWM_LLM_MAX_TOKENS_DB_SCHEMA" in msg
    assert err.value.text  # the partial answer, for the error summary
    assert client.usage()["llm_calls"] == 1  # paid for, so in the ledger
    again = client.chat(MESSAGES, tag=TAG)  # not served from the cache: asked again, answered in full
    assert not again.cached and again.finish_reason == "stop" and len(llm_server.requests) == 2


def test_truncated_answer_can_be_returned(llm_server, make_client):
    client = make_client("openai/gpt-4.1")
    llm_server.faults.append(Fault(truncate=True))
    response = client.chat(MESSAGES, tag=TAG, truncation="return")
    assert response.finish_reason == "length" and response.text


def test_bad_request_is_not_retried(llm_server, make_client):
    client = make_client("openai/gpt-4.1", transport_retries=3)
    llm_server.faults.append(Fault(status=400))
    with pytest.raises(LLMError) as err:
        client.chat(MESSAGES, tag=TAG)
    assert "after 1 tries" in str(err.value) and len(llm_server.requests) == 1
