"""`awm synth` of the demo batch with a real litellm model string (`openai/gpt-5`) against a loopback
OpenAI-protocol server that answers from the demo's recordings: the whole pipeline over HTTP, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from awm_resources.llm import CALL_HEADER
from tests.conftest import PROJECT_ROOT
from tests.llm_conformance.conftest import RECORDINGS

pytestmark = pytest.mark.slow


def test_awm_synth_demo_batch_through_openai_gpt5_over_http(llm_server, tmp_path):
    env = {**os.environ, "AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh"),
           "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled",
           "AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_API_BASE": f"{llm_server.url}/v1", "AWM_LLM_API_KEY": "sk-test",
           "AWM_LLM_REASONING_EFFORT": "medium", "AWM_LLM_MODEL_CLASSIFY": "openai/gpt-5-mini"}
    env.pop("AWM_REPLAY_DIR", None)
    cmd = [sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(PROJECT_ROOT / "seeds" / "demo.jsonl"), "--json"]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert sorted(report["new_scenarios"]) == ["issue_tracker", "music_playlists", "restaurant_reservations"]
    assert all(s["ready"] for s in report["scenarios"]), report["scenarios"]

    calls = [r.headers[CALL_HEADER.lower()] for r in llm_server.requests]
    assert {"_batch_demo/scenarios.1.md", "_batch_demo/classify.1.md", "issue_tracker/db_schema.2.md",
            "music_playlists/env_code.2.md"} <= set(calls)
    assert all((RECORDINGS / c).is_file() for c in calls)  # every call named a recording the server had
    for req in llm_server.requests:
        body = req.body
        assert req.path == "/v1/chat/completions" and "temperature" not in body and "max_tokens" not in body
        assert body["reasoning_effort"] == "medium" and body["max_completion_tokens"] == 128_000
        want = "gpt-5-mini" if req.headers[CALL_HEADER.lower()].endswith("/classify.1.md") else "gpt-5"
        assert body["model"] == want
    by_call = {r.headers[CALL_HEADER.lower()]: r.body for r in llm_server.requests}
    for structured in ("_batch_demo/scenarios.1.md", "_batch_demo/classify.1.md"):  # chat_json callers
        assert by_call[structured]["response_format"]["type"] == "json_schema"
    # The answers were paid for (priced from litellm's bundled cost map) and cached for a rerun.
    assert (tmp_path / "home" / "llm_cache.sqlite").is_file()
