"""Loopback LLM servers (OpenAI and Anthropic protocols) answering from the demo's recordings, and clients
pointed at them: real litellm over real HTTP, nothing leaves 127.0.0.1."""

from __future__ import annotations

import os

import pytest

from tests.conftest import PROJECT_ROOT
from tests.llm_conformance.fake_servers import FakeLLMServer

RECORDINGS = PROJECT_ROOT / "seeds" / "recordings"
# litellm must not fetch its cost map or beta-header table from GitHub (the client sets these too).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


@pytest.fixture(scope="session")
def _llm_server():
    server = FakeLLMServer(RECORDINGS).start()
    yield server
    server.stop()


@pytest.fixture
def llm_server(_llm_server):
    """The shared server, emptied of earlier requests and faults."""
    _llm_server.reset()
    yield _llm_server
    _llm_server.reset()


def api_base_for(server: FakeLLMServer, model: str) -> str:
    """Anthropic's client appends /v1/messages itself; OpenAI-protocol clients append /chat/completions."""
    return server.url if model.startswith("anthropic/") else f"{server.url}/v1"


@pytest.fixture
def make_client(llm_server):
    """An LLMClient for `model` against the loopback server, with tiny backoffs."""
    from awm_resources.llm import LLMClient

    def make(model: str, **kw):
        kw.setdefault("api_base", api_base_for(llm_server, model))
        kw.setdefault("api_key", "sk-test")
        kw.setdefault("backoff_s", 0.01)
        kw.setdefault("timeout_s", 10.0)
        return LLMClient(model, **kw)

    return make
