"""The catalog as a verifiers environment (integrations/verifiers_awm, `make verifiers-venv`): verifiers' own runner
(`vf-eval`, in its own venv) evaluates catalog tasks on `awm serve --openenv` against a loopback OpenAI-protocol model
that answers with the reference solutions as native tool calls; the rewards are the server's verifiers' verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import PROJECT_ROOT
from tests.runtime.serving import openenv_server

VERIFIERS_VENV = PROJECT_ROOT / ".venv" / "verifiers"
SCENARIO = "issue_tracker"
TASKS = 4  # the first four catalog tasks of the scenario
WRONG = 1  # the model answers this one (by its position) without doing it


@pytest.fixture(scope="module")
def server(demo_pristine, tmp_path_factory, ray_address):
    """`awm serve --openenv --port 0` on a copy of the demo store, joined to the session's Ray cluster."""
    import shutil

    store = tmp_path_factory.mktemp("verifiers_store")
    shutil.copytree(demo_pristine, store, dirs_exist_ok=True)
    with openenv_server(store, ray_address, "--scenarios", SCENARIO) as (url, _proc, _line):
        yield url


class SolutionModel(ThreadingHTTPServer):
    """A loopback OpenAI chat-completions endpoint: for a task it knows, the reference solution's next call as a native
    tool call, then its final answer; for a task in `wrong`, a final answer at once (nothing done)."""

    def __init__(self, solutions: dict[str, dict], wrong: set[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.solutions, self.wrong, self.requests = solutions, wrong, []

    def answer(self, body: dict) -> dict:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        made = sum(len(m.get("tool_calls") or []) for m in body["messages"] if m["role"] == "assistant")
        solution = self.solutions[task]
        message: dict = {"role": "assistant", "content": None}
        if task in self.wrong:
            message["content"] = "I could not find a way to do that."
        elif made < len(solution["calls"]):
            call = solution["calls"][made]
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                      "function": {"name": call["tool"], "arguments": json.dumps(call["arguments"])}}]
        else:
            message["content"] = solution["final_answer"]
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "solutions"),
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


class _Handler(BaseHTTPRequestHandler):
    server: SolutionModel

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)
        data = json.dumps(self.server.answer(body)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_vf_eval_scores_catalog_tasks_with_the_verifiers(server, tmp_path):
    python = VERIFIERS_VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"the verifiers venv is missing: expected {python} (make verifiers-venv)")
    import urllib.request

    listed = json.loads(urllib.request.urlopen(server + "/tasks", timeout=30).read())["scenarios"][SCENARIO][:TASKS]
    reference = {t["task_idx"]: t for t in json.loads(
        (PROJECT_ROOT / "seeds" / "solutions" / f"{SCENARIO}.json").read_text())["tasks"]}
    solutions = {t["task"]: reference[t["task_idx"]] for t in listed}
    wrong_task = listed[WRONG]["task"]
    model = SolutionModel(solutions, {wrong_task})
    threading.Thread(target=model.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "vf_out"
        args = {"catalog_url": server, "scenarios": [SCENARIO], "tasks_per_env": TASKS}
        done = subprocess.run(
            [str(VERIFIERS_VENV / "bin" / "vf-eval"), "awm-catalog", "-a", json.dumps(args), "-m", "solutions",
             "-b", f"http://127.0.0.1:{model.server_address[1]}/v1", "-k", "FAKE_MODEL_KEY", "-n", str(TASKS),
             "-r", "1", "-c", str(TASKS), "-s", "-o", str(out), "-C", "awm_verdict", "--disable-env-server", "-d"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path,
            env={**os.environ, "FAKE_MODEL_KEY": "none", "HF_DATASETS_OFFLINE": "1"})
    finally:
        model.shutdown()
        model.server_close()
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    results = [json.loads(line) for path in out.rglob("results.jsonl") for line in path.read_text().splitlines()]
    assert len(results) == TASKS, (sorted(str(p) for p in out.rglob("*")), done.stdout[-2000:])
    # the tools the model was offered are the environment's own listing: no verify, no done
    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert "create_issue" in offered and "verify" not in offered and "done" not in offered, offered
    by_task = {}
    for r in results:
        info = r["info"] if isinstance(r["info"], dict) else json.loads(r["info"])
        by_task[info["task_idx"]] = r
    assert sorted(by_task) == sorted(t["task_idx"] for t in listed)
    for t in listed:
        r, verdict = by_task[t["task_idx"]], by_task[t["task_idx"]]["awm_verdict"]
        if t["task"] == wrong_task:
            assert r["reward"] == 0.0 and verdict["classification"] != "Completed", (t["task_idx"], verdict)
        else:
            assert r["reward"] == 1.0, (t["task_idx"], verdict)
            assert verdict["classification"] == "Completed" and verdict["verifier"]["verdict"] == "complete", verdict
            calls = reference[t["task_idx"]]["calls"]
            assert verdict["steps_taken"] == len(calls), verdict  # each reference call went to the session's instance


def test_load_environment_reads_the_catalog(server):
    """`load_environment` in the verifiers venv: one row per served task, with the environment's tool schemas."""
    code = ("import json, sys, awm_catalog; env = awm_catalog.load_environment(catalog_url=sys.argv[1]); "
            "ds = env.get_eval_dataset(); info = json.loads(ds[0]['info']); "
            "print(json.dumps({'rows': len(ds), 'scenario': info['scenario'], 'tools': info['tool_defs'], "
            "'prompt': ds[0]['prompt']}))")
    done = subprocess.run([str(VERIFIERS_VENV / "bin" / "python"), "-c", code, server], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    import urllib.request

    served = json.loads(urllib.request.urlopen(server + "/tasks", timeout=30).read())["scenarios"]
    assert got["rows"] == sum(len(v) for v in served.values()) and got["scenario"] == SCENARIO
    create = next(t for t in got["tools"] if t["name"] == "create_issue")
    assert create["parameters"]["type"] == "object" and "title" in create["parameters"]["properties"], create
    assert got["prompt"][0]["role"] == "system" and got["prompt"][-1]["role"] == "user"
    bad = subprocess.run([str(VERIFIERS_VENV / "bin" / "python"), "-c",
                          "import sys, awm_catalog; awm_catalog.load_environment(catalog_url=sys.argv[1], "
                          "scenarios=['no_such_env'])", server], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "not served" in bad.stderr and SCENARIO in bad.stderr, bad.stderr[-2000:]
