"""`awm synth` of the demo batch with a real litellm model string (`openai/gpt-5`) against a loopback
OpenAI-protocol server that answers from the demo's recordings: the whole pipeline over HTTP, offline, headless
into a persistent Dagster instance the UI can open afterwards.
In the middle of the batch the server misbehaves as providers do (a 429 with Retry-After, a 503, an answer
slower than the client's timeout, an answer that is prose instead of SQL): each is retried or
self-corrected, the other scenarios go on, and every scenario ends ready with whole artifacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from awm_resources.llm import CALL_HEADER
from tests.conftest import PROJECT_ROOT
from tests.llm_conformance.conftest import RECORDINGS
from tests.llm_conformance.fake_servers import Fault

GARBAGE = "I'm sorry, but I can't share a database schema for that. Is there anything else I can help with?"

pytestmark = pytest.mark.slow


def test_awm_synth_demo_batch_through_openai_gpt5_over_http(llm_server, tmp_path, monkeypatch):
    env = {**os.environ, "AWM_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh"),
           "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled",
           "AWM_LLM_MODEL": "openai/gpt-5", "AWM_LLM_API_BASE": f"{llm_server.url}/v1", "AWM_LLM_API_KEY": "sk-test",
           "AWM_LLM_REASONING_EFFORT": "medium", "AWM_LLM_MODEL_CLASSIFY": "openai/gpt-5-mini",
           "AWM_LLM_TIMEOUT_S": "3"}
    env.pop("AWM_REPLAY_DIR", None)
    llm_server.faults.extend([
        Fault(call="music_playlists/tasks.1.md", status=429, headers={"Retry-After": "1"}),
        Fault(call="restaurant_reservations/api_spec.1.md", status=503),
        Fault(call="music_playlists/sample_data.1.md", sleep_s=4.0),  # past the 3 s client timeout
        Fault(call="issue_tracker/db_schema.1.md", answer=GARBAGE),  # prose, no SQL: a failed attempt
    ])
    cmd = [sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(PROJECT_ROOT / "seeds" / "demo.jsonl"), "--json"]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert sorted(report["new_scenarios"]) == ["issue_tracker", "music_playlists", "restaurant_reservations"]
    by_key = {s["scenario"]: s for s in report["scenarios"]}
    assert all(s["ready"] for s in by_key.values()), report["scenarios"]
    assert by_key["issue_tracker"]["stages"]["db_schema"] == {"status": "ok", "attempts": 2, "error_rate": 0.0}
    assert by_key["music_playlists"]["stages"]["env_code"]["attempts"] == 2
    assert "STEP_START" not in out.stderr  # step DEBUG events stay in the instance, not on the terminal

    calls = [r.headers[CALL_HEADER.lower()] for r in llm_server.requests]
    assert not llm_server.faults, llm_server.faults  # every fault was met
    for retried in ("music_playlists/tasks.1.md", "restaurant_reservations/api_spec.1.md",
                    "music_playlists/sample_data.1.md"):  # transport faults: the same call again
        assert calls.count(retried) == 2, (retried, calls.count(retried))
    # the prose answer failed attempt 1 of db_schema with an error naming what was wrong; attempt 2 corrected it
    from awm_resources.store import ArtifactStore
    attempts = ArtifactStore(tmp_path / "home").list_attempts("issue_tracker", "db_schema")
    assert [a["passed"] for a in attempts] == [False, True], attempts
    failure = json.dumps(attempts[0]["errors"])  # the raw error (the summary given to attempt 2 is a replayed call)
    assert "no valid JSON" in failure and "can't share a database schema" in failure, failure
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

    # The runs are in the persistent instance the UI reads, under the project's job names.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    with dg.DagsterInstance.get() as instance:
        assert sorted(instance.get_dynamic_partitions("scenarios")) == sorted(by_key)
        assert instance.get_latest_materialization_event(dg.AssetKey("environment_catalog")) is not None
        jobs = {r.job_name for r in instance.get_runs()}
        assert {"generate_scenarios", "synthesize_scenario", "refresh_catalog"} <= jobs, jobs
        assert "__ephemeral_asset_job__" not in jobs
    # The catalog is rebuilt headless (what `awm train` reads), again as a refresh_catalog run.
    (tmp_path / "home" / "catalog.json").unlink()
    refreshed = subprocess.run([sys.executable, "-m", "awm_assets.cli", "catalog", "--refresh", "--json"], env=env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert refreshed.returncode == 0, refreshed.stderr[-3000:]
    assert sum(e["ready"] for e in json.loads(refreshed.stdout)) == 3
    # Running the same batch again synthesizes nothing new: scenario generation asks again (its dedup pool now
    # holds the batch), every proposal is a duplicate, and no stage asks anything.
    asked = len(llm_server.requests)
    again = json.loads(subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600).stdout)
    assert again["new_scenarios"] == [] and all(s["ready"] for s in again["scenarios"])
    assert {r.headers[CALL_HEADER.lower()] for r in llm_server.requests[asked:]} <= {"_batch_demo/scenarios.1.md"}
