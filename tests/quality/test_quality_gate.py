"""The quality gate end to end: tool probe statuses, task verdicts, stored results, `awm quality`, the corpus.

One hand-written environment (tests/quality/conftest.py) has a tool per bug class and a task per
verdict; `scenario_quality` must name each one. The corpus test runs the gate on the five generated
environments of ../shared/awm-corpus/generated.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from awm_rl.quality.gate import INELIGIBLE, QUALITY_FILE, stored_quality, summarize_batch
from tests.conftest import GENERATED_DIR, GENERATED_SCENARIOS, PROJECT_ROOT
from tests.quality.conftest import (
    ENV_CODE,
    EXPECTED_TASK_VERDICT,
    EXPECTED_TOOL_STATUS,
    ROWS,
    SCENARIO,
    SOLUTIONS,
    write_initial_db,
)

SERVER_ERROR_SIGNS = {  # tool -> what its 5xx error text must name
    "create_project": ("IntegrityError", "UNIQUE constraint failed: projects.name"),
    "update_project_deadline": ("StatementError", "DateTime"),
    "create_note": ("IntegrityError", "NOT NULL constraint failed: notes.created_at"),
    "rename_project": ("DetachedInstanceError",),
}
SCENARIO_KEYS = {"scenario", "tools_total", "tools_ok", "tools_server_error", "tools_client_error_only", "shadowed",
                 "tools", "tasks", "vacuous", "blocked", "unsolvable", "verifier_crash"}
TOTALS_KEYS = {"environments", "environments_with_bugs", "share_with_bugs", "bugs_per_environment", "tools_total",
               "tools_ok", "tools_server_error", "tools_server_error_on_edge", "tools_client_error_only",
               "environments_with_server_errors", "tasks", "tasks_eligible", "share_blocked", *INELIGIBLE,
               "solvable_yes"}


# ------------------------------------------------------------------------------------ tool probe

def test_every_tool_gets_its_status(quality_result):
    assert "error" not in quality_result, quality_result.get("error")
    statuses = {name: t["status"] for name, t in quality_result["tools"].items()}
    assert statuses == EXPECTED_TOOL_STATUS
    for name, t in quality_result["tools"].items():
        assert t["calls"] >= 1, name


def test_server_errors_carry_arguments_status_and_exception(quality_result):
    tools = quality_result["tools"]
    for name, signs in SERVER_ERROR_SIGNS.items():
        errors = tools[name]["errors"]
        assert errors, name
        for err in errors:
            assert err["status_code"] == 500, (name, err)
            assert isinstance(err["args"], dict) and err["args"], (name, err)
            for sign in signs:
                assert sign in err["error"], (name, sign, err["error"])
    # the failing create was sent an existing unique name: the duplicate that must answer 409
    names = {r[2] for r in ROWS["projects"]}
    assert any(e["args"].get("name") in names for e in tools["create_project"]["errors"])
    assert any(e["input"] == "edge:duplicate" for e in tools["create_project"]["errors"])
    # the valid-input errors of the other tools came from valid (grounded) inputs on existing projects
    project_ids = {r[0] for r in ROWS["projects"]}
    for name in ("update_project_deadline", "create_note", "rename_project"):
        assert any(e["input"].startswith("valid") and e["args"]["project_id"] in project_ids
                   for e in tools[name]["errors"]), name


def test_server_error_on_edge_only_for_a_missing_id(quality_result):
    tool = quality_result["tools"]["get_user"]
    assert tool["errors"] and all(e["status_code"] == 500 for e in tool["errors"])
    user_ids = {r[0] for r in ROWS["users"]}
    for err in tool["errors"]:
        assert err["input"] == "edge:nonexistent_id"
        assert err["args"]["user_id"] not in user_ids
        assert "AttributeError" in err["error"]


def test_ok_tools_answer_404_and_422_not_500(quality_result):
    for name in ("list_projects", "get_project"):
        tool = quality_result["tools"][name]
        assert all(400 <= e["status_code"] < 500 for e in tool["errors"]), (name, tool["errors"])
        assert tool["writes"] == []
    assert any(e["status_code"] == 404 and e["input"] == "edge:nonexistent_id"
               for e in quality_result["tools"]["get_project"]["errors"])


def test_writes_shadowing_and_notes(quality_result):
    tools = quality_result["tools"]
    assert tools["create_project"]["writes"] == ["projects"]  # its fresh (non-duplicate) create succeeded
    assert tools["view_project"]["writes"] == ["projects"]
    assert "projects" in tools["view_project"]["note"]
    for name in ("create_note", "update_project_deadline", "rename_project", "list_projects_by_region"):
        assert tools[name]["writes"] == [], name
    assert tools["get_project_summary"]["shadowed_by"] == "get_project"
    assert tools["search_projects"]["shadowed_by"] == "get_project"
    assert tools["list_projects_by_region"]["note"]
    assert not tools["list_projects_by_region"]["errors"]


# ------------------------------------------------------------------------------------ tasks

def test_task_verdicts(quality_result):
    tasks = quality_result["tasks"]
    assert [t["task_idx"] for t in tasks] == list(range(len(EXPECTED_TASK_VERDICT)))
    assert [t["verdict"] for t in tasks] == EXPECTED_TASK_VERDICT
    assert [t["eligible"] for t in tasks] == [v == "ok" for v in EXPECTED_TASK_VERDICT]
    ok, vacuous, crash, blocked, unsolvable, nondet = tasks
    assert ok["solvable"] == "yes" and ok["reason"] == ""
    assert "complete" in ok["solution_detail"]
    assert "complete" in vacuous["reason"]
    assert "milestones" in crash["reason"]
    assert "badges" in blocked["reason"]
    assert "projects" in blocked["reason"]  # what the tools can write, for the reader
    assert unsolvable["solvable"] == "no" and "'others'" in unsolvable["reason"]
    # why: every call with its status and answer, the verifier's whole dict, the rows it reads that changed
    assert 'get_project({"project_id": 1}) -> HTTP 200: {"id":1,' in unsolvable["reason"]
    assert 'The verifier returned: {"result": "others"}' in unsolvable["reason"]
    assert "tables the verifier reads (projects): none" in unsolvable["reason"]
    assert unsolvable["clean_run"] is True
    assert "it returned: {" in vacuous["reason"]
    assert "disagree" in nondet["reason"]
    # without a reference solution a task stays unverified
    assert {t["solvable"] for t in (vacuous, crash, blocked, nondet)} == {"unverified"}


def test_counts_and_batch_totals_match_the_details(quality_result):
    r = quality_result
    statuses = [t["status"] for t in r["tools"].values()]
    assert r["tools_total"] == len(statuses) == len(EXPECTED_TOOL_STATUS)
    assert r["tools_ok"] == statuses.count("ok") == 2
    assert r["tools_server_error"] == statuses.count("server_error") == 4
    assert r["tools_server_error_on_edge"] == statuses.count("server_error_on_edge") == 1
    assert r["tools_client_error_only"] == statuses.count("client_error_only") == 0
    assert r["shadowed"] == statuses.count("shadowed") == 2
    assert r["writes_on_read"] == 1 and r["suspicious_empty"] == 1 and r["not_probed"] == 0
    assert r["tools_with_bugs"] == len(statuses) - statuses.count("ok") - statuses.count("client_error_only") == 9
    verdicts = [t["verdict"] for t in r["tasks"]]
    for kind in INELIGIBLE:
        assert r[kind] == verdicts.count(kind), kind
    assert r["verifier_crash"] == r["crash"] == 1
    assert r["eligible_tasks"] == 1

    totals = summarize_batch([r])
    assert TOTALS_KEYS <= set(totals)
    assert totals["environments"] == 1 and totals["environments_with_bugs"] == 1 and totals["share_with_bugs"] == 1.0
    assert totals["bugs_per_environment"] == r["tools_with_bugs"]
    for key in ("tools_total", "tools_ok", "tools_server_error", "tools_server_error_on_edge", "tools_client_error_only"):
        assert totals[key] == r[key], key
    assert totals["environments_with_server_errors"] == 1
    assert totals["tasks"] == len(r["tasks"]) and totals["tasks_eligible"] == 1
    for kind in INELIGIBLE:
        assert totals[kind] == r[kind], kind
    assert totals["share_blocked"] == round(1 / len(r["tasks"]), 4)
    assert totals["solvable_yes"] == 1
    # a second, clean copy of the batch doubles the counts and keeps the shares
    double = summarize_batch([r, r])
    assert double["tools_server_error"] == 2 * r["tools_server_error"] and double["share_with_bugs"] == 1.0
    assert summarize_batch([])["environments"] == 0


def test_write_coverage_of_the_environment(tmp_path):
    from awm_rl.quality.coverage import blocked_reason, static_writable_tables, uses_final_answer
    from awm_rl.quality.dbfacts import read_facts
    from tests.quality.conftest import TASKS

    initial = tmp_path / "initial.db"
    write_initial_db(initial)
    facts = read_facts(initial)
    # non-GET handlers name Project and Note; the GET that writes is only seen by the probe
    assert static_writable_tables(ENV_CODE, facts) == {"projects", "notes"}
    blocked_code = TASKS[3][1]
    assert not uses_final_answer(blocked_code)
    assert "badges" in blocked_reason(blocked_code, facts, {"projects", "notes"})
    assert blocked_reason(blocked_code, facts, {"badges"}) is None
    assert blocked_reason(TASKS[0][1], facts, {"projects"}) is None
    answer_code = blocked_code.replace('return {"result": "complete" if',
                                       'return {"result": "complete" if final_answer == "done" or')
    assert uses_final_answer(answer_code) and blocked_reason(answer_code, facts, set()) is None


def test_answer_read_through_kwargs_is_not_blocked(tmp_path):
    from awm_rl.quality.coverage import blocked_reason
    from awm_rl.quality.dbfacts import read_facts

    initial = tmp_path / "initial.db"
    write_initial_db(initial)
    code = (
        "import sqlite3\n\n\n"
        "def verify_task_completion(initial_db_path, final_db_path, **kw):\n"
        "    n = sqlite3.connect(final_db_path).execute('SELECT COUNT(*) FROM badges').fetchone()[0]\n"
        "    return {'result': 'complete' if f'{n} badge' in (kw.get('final_answer') or '') else 'others'}\n"
    )
    assert blocked_reason(code, read_facts(initial), {"projects"}) is None


# ------------------------------------------------------------------------------------ stored result

def test_quality_json_is_stored_and_invalidated(quality_store, quality_result, tmp_path):
    from awm_resources.store import ArtifactStore

    stored = quality_store.path(SCENARIO, QUALITY_FILE)
    assert stored.is_file()
    assert json.loads(stored.read_text()) == json.loads(json.dumps(quality_result))
    assert stored_quality(quality_store, SCENARIO) == json.loads(json.dumps(quality_result))
    # a copy of the scenario (same files) keeps its result until a checked file changes
    shutil.copytree(quality_store.scenario_dir(SCENARIO), tmp_path / "scenarios" / SCENARIO)
    copy = ArtifactStore(tmp_path)
    assert stored_quality(copy, SCENARIO) is not None
    server = copy.path(SCENARIO, "server.py")
    server.write_text(ENV_CODE + "\n# changed\n")
    assert stored_quality(copy, SCENARIO) is None
    server.write_text(ENV_CODE)
    assert stored_quality(copy, SCENARIO) is not None
    copy.path(SCENARIO, "solutions.json").write_text(json.dumps({"tasks": []}))
    assert stored_quality(copy, SCENARIO) is None
    assert stored_quality(copy, "no_such_scenario") is None


# ------------------------------------------------------------------------------------ check_env_code

def test_check_env_code_runs_probe_and_solutions(tmp_path):
    from awm_rl.quality.envcheck import check_env_code

    initial = tmp_path / "initial.db"
    write_initial_db(initial)
    solution = SOLUTIONS["tasks"][0]
    check = check_env_code(ENV_CODE, initial, probe=True, solutions={0: solution}, snapshot_dir=tmp_path / "snap")
    assert check.shadowed_tools == {"get_project_summary": "get_project", "search_projects": "get_project"}
    assert not check.ok and "unreachable" in check.error  # shadowed routes fail the execution check
    assert {k: v["status"] for k, v in check.probe.items()} == EXPECTED_TOOL_STATUS
    run = check.solutions["0"]
    assert [c["status"] for c in run["calls"]] == [201] and run["final_answer"] == solution["final_answer"]
    final, start = Path(run["final_db"]), Path(run["initial_db"])
    assert final.parent == start.parent == (tmp_path / "snap").resolve()
    name = solution["calls"][0]["arguments"]["name"]
    q = "SELECT COUNT(*) FROM projects WHERE name = ?"
    assert sqlite3.connect(final).execute(q, (name,)).fetchone()[0] == 1
    assert sqlite3.connect(start).execute(q, (name,)).fetchone()[0] == 0
    with pytest.raises(ValueError):
        check_env_code(ENV_CODE, initial, solutions={0: solution})


# ------------------------------------------------------------------------------------ CLI

def _awm(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AWM_HOME": str(root)}
    return subprocess.run([str(PROJECT_ROOT / ".venv" / "bin" / "awm"), "quality", *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=PROJECT_ROOT)


def test_cli_quality_json(quality_store, quality_result):
    proc = _awm(quality_store.root, "--json", SCENARIO)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == {"scenarios", "totals"}
    [scenario] = report["scenarios"]
    assert SCENARIO_KEYS <= set(scenario)
    assert scenario["scenario"] == SCENARIO
    assert {k: v["status"] for k, v in scenario["tools"].items()} == EXPECTED_TOOL_STATUS
    assert [t["verdict"] for t in scenario["tasks"]] == EXPECTED_TASK_VERDICT
    assert TOTALS_KEYS <= set(report["totals"])
    assert report["totals"] == summarize_batch([scenario])
    assert report["totals"]["tools_server_error"] == quality_result["tools_server_error"]


def test_cli_quality_unknown_scenario(quality_store):
    proc = _awm(quality_store.root, "--json", "no_such_env_xyz")
    assert proc.returncode == 2
    assert "no_such_env_xyz" in proc.stderr
    assert proc.stdout.strip() == ""


def test_unchecked_scenario_keeps_the_documented_keys(tmp_path):
    from awm_resources.store import ArtifactStore
    from awm_rl.quality.gate import scenario_quality

    folder = tmp_path / "scenarios" / "no_db"
    folder.mkdir(parents=True)
    (folder / "server.py").write_text(ENV_CODE)
    result = scenario_quality(ArtifactStore(tmp_path), "no_db")
    assert "initial.db" in result["error"]
    assert SCENARIO_KEYS <= set(result)


# ------------------------------------------------------------------------------------ the corpus

@pytest.fixture(scope="module")
def corpus_quality(tmp_path_factory):
    if not GENERATED_DIR.is_dir():
        pytest.skip(f"the AWM corpus is absent: expected {GENERATED_DIR} (../shared/awm-corpus/generated)")
    from awm_resources.interop import import_awm_dir
    from awm_resources.store import ArtifactStore
    from awm_rl.quality.gate import scenario_quality

    store = ArtifactStore(tmp_path_factory.mktemp("quality_corpus"))
    report = import_awm_dir(GENERATED_DIR, store)
    assert sorted(report.scenarios) == GENERATED_SCENARIOS
    return {name: scenario_quality(store, name) for name in GENERATED_SCENARIOS}


@pytest.mark.slow
def test_corpus_quality(corpus_quality):
    for name, result in corpus_quality.items():
        assert "error" not in result, (name, result.get("error"))
        assert result["tools_total"] > 0, name
        not_probed = [t for t, v in result["tools"].items() if v["status"] == "not_probed"]
        assert result["not_probed"] == 0 and not not_probed, (name, not_probed)
        assert len(result["tasks"]) == 10, name
    with_errors = [n for n, r in corpus_quality.items() if r["tools_server_error"] > 0]
    assert len(with_errors) >= 4, {n: r["tools_server_error"] for n, r in corpus_quality.items()}
    fortnite = corpus_quality["fortnite_item_shop"]["tools"]
    assert fortnite["refund_most_recent_eligible_purchase"]["status"] == "server_error"
    doordash = corpus_quality["doordash_drive_delivery_tracking"]["tools"]
    assert any("DateTime" in (e["error"] or "") for t in doordash.values() if t["status"] == "server_error"
               for e in t["errors"]), {k: v["status"] for k, v in doordash.items()}
    totals = summarize_batch(list(corpus_quality.values()))
    assert totals["environments"] == 5 and totals["environments_with_server_errors"] == len(with_errors)
    assert totals["tools_total"] == sum(r["tools_total"] for r in corpus_quality.values())
