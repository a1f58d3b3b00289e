"""`awm eval mcp-universe` offline: MCP-Universe's own servers (echo, calculator), clients and evaluators, run from
its own venv, over this project's task files in MCP-Universe's format; the tasks needing live services skipped
and named."""

from __future__ import annotations

import json
from pathlib import Path

from awm_rl.mcp_universe.commands import main

TASKS = Path(__file__).with_name("tasks")
ANSWERS = {
    "offline/echo_code": {"calls": [{"tool": "echo_tool", "arguments": {"text": "awm-universe-42"}}],
                          "final_answer": '{"echoed": "awm-universe-42"}'},
    "offline/sum_with_calculator": {"calls": [{"tool": "calculate", "arguments": {"expression": "17 * 23 + 100"}}],
                                    "final_answer": '{"result": 491}'},
}


def run(tmp_path: Path, capsys, answers: dict, *extra: str) -> dict:
    script = tmp_path / "answers.json"
    script.write_text(json.dumps(answers))
    code = main(["--tasks", str(TASKS / "benchmark.yaml"), "--policy", f"scripted:{script}", "--json",
                 "--out", str(tmp_path / "out"), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return json.loads(captured.out)


def test_offline_tasks_run_scored_by_its_evaluators_and_live_ones_are_named(tmp_path, capsys):
    """One run: the echo task answered right, the calculator task wrong (490), the two live tasks skipped."""
    answers = {**ANSWERS, "offline/sum_with_calculator": {**ANSWERS["offline/sum_with_calculator"],
                                                          "final_answer": '{"result": 490}'}}
    report = run(tmp_path, capsys, answers)
    assert report["package"] == "mcpuniverse" and report["package_version"]
    assert (report["tasks"], report["ran"]) == (4, 2)
    # the live servers, named with why, and the tasks skipped for them
    assert set(report["live_servers"]) == {"weather", "github"}
    assert "network" in report["live_servers"]["weather"] and "docker" in report["live_servers"]["github"]
    assert set(report["skipped"]) == {"live/forecast", "live/repository"}
    assert report["skipped"]["live/repository"][0].startswith("github: ")
    assert report["success_rate"] == 0.5 and report["average_evaluator_score"] == 0.5
    by_id = {t["task_id"]: t for t in report["per_task"]}
    echo = by_id["offline/echo_code"]
    assert echo["success"] and [e["passed"] for e in echo["evaluators"]] == [True, True] and echo["servers"] == ["echo"]
    episode = json.loads(Path(echo["trajectory"]).read_text())["episode"]
    tool_texts = [s["tool"]["text"] for s in episode["steps"] if s["tool"]]
    assert "echo_tool" in tool_texts[0] and tool_texts[1] == "awm-universe-42"  # the server's own answer
    calc = by_id["offline/sum_with_calculator"]
    episode = json.loads(Path(calc["trajectory"]).read_text())["episode"]
    assert [s["tool"]["text"] for s in episode["steps"] if s["tool"]][1] == "491"  # the calculator server computed it
    [verdict] = calc["evaluators"]
    assert not calc["success"] and verdict["passed"] is False and "not equal" in verdict["reason"]
    assert report["average_steps"] == 3.0  # list_tools, the call, the answer


def test_missing_tasks_and_venv_say_so(tmp_path, capsys):
    assert main(["--tasks", str(tmp_path / "none.yaml"), "--policy", "tiny"]) == 2
    assert "no MCP-Universe tasks" in capsys.readouterr().err
    assert main(["--tasks", str(TASKS / "offline"), "--policy", "tiny", "--mcpu-python", str(tmp_path / "py")]) == 2
    assert "make mcp-universe-venv" in capsys.readouterr().err
    # Chat options given to a scripted policy would be ignored: said instead.
    assert main(["--tasks", str(TASKS / "offline"), "--policy", "scripted:x.json", "--reasoning", "optional"]) == 2
    assert "reasoning apply to chat policies" in capsys.readouterr().err
