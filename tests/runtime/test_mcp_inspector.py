"""`awm serve` driven by the official MCP Inspector CLI (npm `@modelcontextprotocol/inspector`), an
outside MCP client that checks structured results against the listed output schemas itself.

The scenario is the corpus env rover plus two routes it lacks: one whose response model is a list
(wrapped as `{"result": [...]}`) and one that bypasses its response model (generated code can lie).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from .conftest import make_scenario
from .serving import start_serve, stop_serve

INSPECTOR = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "mcp-inspector"

EXTRA_ROUTES = '''

from fastapi.responses import JSONResponse as _AwmJSONResponse
from sqlalchemy import text as _awm_text


class _AwmThreadCount(BaseModel):
    count: int


@app.get("/api/awm-test/thread-codes", operation_id="list_thread_codes", response_model=List[str])
def list_thread_codes():
    s = SessionLocal()
    codes = [r[0] for r in s.execute(_awm_text("SELECT thread_code FROM message_threads ORDER BY id"))]
    s.close()
    return codes


@app.get("/api/awm-test/thread-count", operation_id="count_threads_lying", response_model=_AwmThreadCount)
def count_threads_lying():
    return _AwmJSONResponse({"count": "many"})  # a Response skips FastAPI's check of the response model
'''


@pytest.fixture(scope="module")
def inspector() -> Path:
    if not os.access(INSPECTOR, os.X_OK):
        pytest.fail(f"the MCP Inspector CLI is missing ({INSPECTOR}): run `make mcp-inspector` (needs Node.js "
                    "and npm; it installs the pinned @modelcontextprotocol/inspector into .tools/)")
    return INSPECTOR


@pytest.fixture(scope="module")
def served(corpus_store, tmp_path_factory):
    root = tmp_path_factory.mktemp("inspector_store")
    src = corpus_store.scenario_dir("rover")
    make_scenario(root, "rover_plus", (src / "server.py").read_text() + EXTRA_ROUTES, src / "initial.db")
    proc, url = start_serve(root, "rover_plus")
    yield url
    stop_serve(proc)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inspector_home")  # the Inspector's catalog and client config


@pytest.fixture(scope="module")
def listing(inspector, served, home) -> tuple[int, dict]:
    return _inspect(inspector, served, home, "--method", "tools/list", "--strict")


def _inspect(inspector: Path, url: str, home: Path, *args: str) -> tuple[int, dict]:
    """One Inspector CLI run (its catalog and client config in `home`); (exit code, the JSON it printed)."""
    res = subprocess.run([str(inspector), "--cli", url, "--transport", "http", "--format", "json", *args],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(home)})
    assert res.stdout.strip(), f"the Inspector printed nothing (exit {res.returncode}): {res.stderr[-2000:]}"
    return res.returncode, json.loads(res.stdout)


def _call(inspector, url, home, tool: str, *args: str) -> tuple[int, dict]:
    return _inspect(inspector, url, home, "--method", "tools/call", "--tool-name", tool, *args)


def test_inspector_lists_output_schemas(listing):
    rc, out = listing
    assert rc == 0, out  # --strict: exit 6 on a tool schema that is not portable
    tools = {t["name"]: t for t in out["result"]["tools"]}
    pet = tools["create_pet"]["outputSchema"]  # response_model=PetResponse-like model: the object itself
    assert pet["type"] == "object" and {"id", "name", "species"} <= set(pet["properties"])
    codes = tools["list_thread_codes"]["outputSchema"]  # List[str]: wrapped, as fastmcp does
    assert codes["x-fastmcp-wrap-result"] is True and codes["required"] == ["result"]
    assert codes["properties"]["result"]["type"] == "array"
    assert tools["reset_environment"]["outputSchema"]["properties"]["reset"] == {"type": "boolean"}
    for tool in tools.values():
        Draft202012Validator.check_schema(tool["outputSchema"])


def test_inspector_structured_results(inspector, served, home, listing):
    schemas = {t["name"]: t["outputSchema"] for t in listing[1]["result"]["tools"]}
    rc, out = _call(inspector, served, home, "list_message_threads")
    result = out["result"]
    assert rc == 0 and result["isError"] is False
    assert result["structuredContent"] == json.loads(result["content"][0]["text"])
    threads = result["structuredContent"]["threads"]
    assert threads, "rover's initial database has message threads"
    Draft202012Validator(schemas["list_message_threads"]).validate(result["structuredContent"])

    rc, out = _call(inspector, served, home, "list_thread_codes")
    result = out["result"]
    codes = json.loads(result["content"][0]["text"])
    assert rc == 0 and result["structuredContent"] == {"result": codes}
    assert {t["thread_code"] for t in threads} <= set(codes)  # the user's threads among all of them


def test_inspector_errors(inspector, served, home):
    """FastAPI's 422 and a response that breaks its own model: isError with the detail, no structured content."""
    rc, out = _call(inspector, served, home, "create_pet", "--tool-arg", "name=Rex")
    result = out["result"]
    assert rc == 5 and result["isError"] is True and "structuredContent" not in result
    detail = json.loads(result["content"][0]["text"])["detail"]
    assert [(d["type"], d["loc"][-1]) for d in detail] == [("missing", "species")]

    rc, out = _call(inspector, served, home, "count_threads_lying")
    result = out["result"]
    assert rc == 5 and result["isError"] is True and "structuredContent" not in result
    body, note = (c["text"] for c in result["content"])
    assert json.loads(body) == {"count": "many"}
    assert "does not match the tool's output schema" in note and "$.count" in note and "HTTP 200" in note
