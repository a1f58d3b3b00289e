"""`awm repair`: search/replace edits, and the repair loop on a corpus environment and the hand-written one.

The LLM answers come from recordings in tests/quality/recordings (replay model): a repair of the corpus
doordash environment's date handling and unique-row conflicts, its task 0's reference solution, and a
regenerated verifier for the hand-written environment's vacuous task.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from awm_assets.synthesis.edits import apply_edits, parse_edits
from awm_resources.interop import import_awm_dir
from awm_resources.llm import LLMClient
from awm_resources.store import ArtifactStore
from tests.quality.conftest import SCENARIO, write_scenario

RECORDINGS = Path(__file__).parent / "recordings"
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "awm-corpus" / "generated"
DOORDASH = "doordash_drive_delivery_tracking"

CODE = "import os\n\n\ndef f(x):\n    return x + 1   \n\n\ndef g(y):\n    return y\n"


def _edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


# -- edits ------------------------------------------------------------------------------------------

def test_edits_apply_in_order_and_match_trailing_whitespace_loosely():
    answer = ("Two fixes.\n" + _edit("def f(x):\n    return x + 1\n", "def f(x):\n    return x + 2\n")
              + _edit("def g(y):\n    return y\n", "def g(y):\n    return -y\n"))
    assert len(parse_edits(answer)) == 2
    out = apply_edits(CODE, answer)
    assert out.errors == [] and out.applied == 2
    assert "return x + 2" in out.text and "return -y" in out.text and out.text.startswith("import os")


def test_edit_errors_name_the_edit_and_the_rest_still_apply():
    answer = (_edit("def nowhere():\n", "def somewhere():\n") + _edit("\n\n", "\n")
              + _edit("def g(y):\n", "def g(y, z=0):\n"))
    out = apply_edits(CODE, answer)
    assert out.applied == 1 and "def g(y, z=0):" in out.text
    assert out.errors[0].startswith("edit 1:") and "not in the current file" in out.errors[0]
    assert out.errors[1] == "edit 2: empty SEARCH text"
    twice = apply_edits("a = 1\nb = 2\na = 1\n", _edit("a = 1\n", "a = 3\n"))
    assert twice.applied == 0 and twice.errors[0].startswith("edit 1:") and "occurs 2 times" in twice.errors[0]


def test_answer_without_edits_is_a_whole_file_or_an_error():
    whole = apply_edits(CODE, "```python\n" + CODE.replace("x + 1", "x + 3") + "```")
    assert whole.whole_file and "x + 3" in whole.text
    nothing = apply_edits(CODE, "I would change f.")
    assert nothing.text == CODE and nothing.applied == 0 and "no SEARCH/REPLACE" in nothing.errors[0]
    fragment = apply_edits(CODE, "```python\nreturn x\n```")  # a snippet is not a file
    assert not fragment.whole_file and fragment.errors


# -- the loop on a corpus environment ---------------------------------------------------------------

@pytest.fixture()
def corpus_store(tmp_path, monkeypatch):
    if not CORPUS.is_dir():
        pytest.fail(f"the AWM corpus is missing at {CORPUS} (../shared/awm-corpus/generated)")
    store = ArtifactStore(tmp_path / "home")
    import_awm_dir(CORPUS, store)
    monkeypatch.setenv("AWM_HOME", str(store.root))
    monkeypatch.setenv("AWM_REPLAY_DIR", str(RECORDINGS))
    monkeypatch.delenv("AWM_LLM_MODEL", raising=False)
    return store


def _original_solution_run(code: str, initial: Path, solution: dict) -> list[dict]:
    from awm_rl.quality.envcheck import check_env_code

    with tempfile.TemporaryDirectory() as tmp:
        check = check_env_code(code, initial, timeout_s=60, solutions={0: solution}, snapshot_dir=Path(tmp))
    return check.solutions["0"]["calls"]


@pytest.mark.slow
def test_repair_of_corpus_date_handling_through_the_dagster_job(corpus_store, monkeypatch):
    from awm_assets import inprocess
    from awm_assets.defs import repair
    from awm_assets.defs.shared.resources import build_resources

    # `awm repair` loads the code location in its own process, so its resources see this environment
    # (AWM_REPLAY_DIR above); this process may have loaded it before the fixture set it.
    monkeypatch.setattr(inprocess, "defs", dg.Definitions.merge(repair.defs, dg.Definitions(resources=build_resources())))
    original = corpus_store.read_text(DOORDASH, "server.py")
    instance = dg.DagsterInstance.ephemeral()
    [report] = inprocess.repair_scenarios([DOORDASH], {"attempts": 2, "phases": ["env_code", "solutions"], "tasks": [0]}, instance)

    assert not report.get("error"), report
    assert report["before"]["tools_server_error"] == 8 and report["after"]["tools_server_error"] == 0
    env = report["phases"]["env_code"]
    assert env["repaired"] and env["changed"] and env["attempts"] == 1
    # Attempt 0 is the stored code with the probe's errors, attempt 1 the recorded edits.
    zero, one = corpus_store.list_attempts(DOORDASH, "env_code_repair")
    assert zero["source"] == "stored" and not zero["passed"] and zero["artifact"]["code"] == original
    assert any("create_delivery_order" in e and "DateTime" in e for e in zero["errors"]["_"])
    assert one["passed"] and one["metrics"]["edits_applied"] == 1 and one["metrics"]["tools_lost"] == 0
    # Nothing lost: the imported code is kept beside the repaired one; the status says where it came from.
    assert corpus_store.read_text(DOORDASH, "server.original.py") == original
    assert corpus_store.read_text(DOORDASH, "server.py") != original
    status = corpus_store.stage_status(DOORDASH, "env_code")
    assert status["source"] == "repaired" and status["repaired_from"] == "imported"

    quality = json.loads(corpus_store.path(DOORDASH, "quality.json").read_text())
    tools = quality["tools"]
    assert tools["create_delivery_order"]["status"] == "ok"
    assert tools["assign_driver_to_order"]["status"] in ("ok", "client_error_only")  # a repeat answers 409 now
    assert all(t["status"] != "server_error" for t in tools.values())
    # Task 0 is proven solvable by the recorded solution, which needs the date repair: on the imported
    # code its first call (a delivery window as ISO strings) fails with a 500.
    assert quality["tasks"][0]["solvable"] == "yes"
    solution = json.loads(corpus_store.read_text(DOORDASH, "solutions.json"))["tasks"][0]
    assert solution["proven"] and solution["calls"][0]["tool"] == "create_delivery_order"
    calls = _original_solution_run(original, corpus_store.path(DOORDASH, "initial.db"), solution)
    assert calls[0]["status"] == 500 and "DateTime" in calls[0]["error"]
    # The dates land in the stored format the verifier (and the sample data) use.
    conn = sqlite3.connect(corpus_store.path(DOORDASH, "initial.db"))
    assert conn.execute("SELECT MAX(id) FROM delivery_orders").fetchone()[0] == 108  # the template is untouched
    conn.close()

    # The run is in the instance, with the repaired env_code as a materialization of the partition.
    mats = [e for e in instance.all_logs(report["run_id"]) if e.dagster_event and e.dagster_event.is_step_materialization]
    [mat] = [m.dagster_event.event_specific_data.materialization for m in mats]
    assert mat.asset_key == dg.AssetKey("env_code") and mat.partition == DOORDASH
    assert mat.metadata["source"].value == "repaired"
    history = mat.metadata["attempt_history"].value
    assert "Attempt 0 (the stored artifact): failed" in history and "+class DateTime(TypeDecorator):" in history


def test_repair_without_an_answer_fails_clearly_and_changes_nothing(corpus_store, capsys):
    from awm_assets.cli import main

    before = corpus_store.read_text("gofundme", "server.py")
    rc = main(["repair", "gofundme", "--no-dagster", "--phases", "env_code"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "gofundme: FAILED" in out and "no recorded answer for stage 'env_code_repair'" in out
    assert corpus_store.read_text("gofundme", "server.py") == before
    assert not corpus_store.has("gofundme", "server.original.py")
    assert main(["repair", "no_such_scenario"]) == 2


# -- verifier regeneration on the hand-written environment -------------------------------------------

def test_repair_regenerates_a_vacuous_verifier_with_a_proven_solution(tmp_path):
    from awm_assets.synthesis.repair import repair_scenario

    folder = write_scenario(tmp_path)
    conn = sqlite3.connect(folder / "initial.db")
    tables = [{"name": n, "ddl": sql, "indexes": []} for n, sql in
              conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    conn.close()
    (folder / "schema.json").write_text(json.dumps({"tables": tables}))
    store = ArtifactStore(tmp_path)
    stored = json.loads((folder / "verifiers.json").read_text())["verifiers"]

    report = repair_scenario(store, LLMClient(replay_dir=RECORDINGS), SCENARIO, phases=("verifiers",), tasks=[1],
                             max_attempts=2)

    assert not report.get("error"), report
    assert report["before"]["vacuous"] == 1 and report["after"]["vacuous"] == 0
    phase = report["phases"]["verifiers"]
    assert phase["repaired"] and phase["changed"] and phase["attempts"] == 1
    zero = store.list_attempts(SCENARIO, "verifiers_repair")[0]
    assert list(zero["errors"]) == ["task_1"] and "vacuous" in zero["errors"]["task_1"][0].lower()
    entries = {e["task_idx"]: e for e in store.read_json(SCENARIO, "verifiers.json")["verifiers"]}
    assert entries[1]["code"] != stored[1]["code"] and entries[1]["reference_solution"]["calls"][0]["tool"] == "list_projects"
    assert all(entries[i]["code"] == stored[i]["code"] for i in (0, 2, 3, 4, 5))  # the others are kept
    task = next(t for t in json.loads((folder / "quality.json").read_text())["tasks"] if t["task_idx"] == 1)
    assert task["verdict"] == "ok" and task["solvable"] == "yes"
    shutil.rmtree(folder)


# -- fixing the right side (issue 22, item 4): recordings written by hand, see their first line ---------

def test_repair_fixes_the_side_at_fault_verifier_or_data_and_a_refused_fix_leaves_the_diagnosis(tmp_path):
    from benchmarks.repair import run_case

    # `awm bench repair`'s case: task 4's verifier reads only the initial database; tasks 6 and 7 ask to
    # create projects whose unique names the seed data already holds.
    row = run_case("verifier_at_fault", tmp_path)

    assert row["error"] is None, row
    assert row["calls_per_phase"] == {"solutions": {"answers": 4}} and row["attempts_per_phase"] == {"solutions": 1}
    assert row["verifier_generations"] == {"task_4": 1} and row["data_changes_kept"] == 1
    assert row["tasks_proven"] == {"before": 1, "after": 3}
    assert list(row["excluded"]) == ["7"] and row["excluded"]["7"].startswith("unsolvable: diagnosis (data at fault)")
    store = ArtifactStore(tmp_path)
    folder = store.scenario_dir(SCENARIO)
    zero, one = store.list_attempts(SCENARIO, "solutions")
    # The stored solution of task 4 ran cleanly; attempt 0 says so with its calls and the verifier's dict.
    assert "(all answered 2xx)" in zero["errors"]["task_4"][0] and '"zephyr_in_initial": 0' in zero["errors"]["task_4"][0]
    assert one["metrics"]["at_fault"] == {"4": "verifier", "6": "data", "7": "data"}
    assert "Diagnosis: The earlier calls answered 2xx" in one["prompts"]["task_4.verifier"][-1]["content"]
    verifier = next(e for e in store.read_json(SCENARIO, "verifiers.json")["verifiers"] if e["task_idx"] == 4)
    assert "final_db_path" in verifier["code"] and verifier["regenerated_from"].startswith("The earlier calls")
    # Task 7's change would make task 0's verifier pass for a do-nothing agent and its solution fail: refused.
    failed_run, refused = one["errors"]["task_7"]  # its run on the stored database, then the refusal
    assert "HTTP 500" in failed_run
    assert refused.startswith("the proposed data change was not kept") and "breaks task 0" in refused
    assert "task_0 fails the do-nothing check" in refused and "task_6" not in one["errors"]
    assert "task 7 wants this change and task 0 forbids it" in refused  # both named
    # Task 6's change is applied to the stored database (the original kept) and logged.
    conn = sqlite3.connect(folder / "initial.db")
    assert conn.execute("SELECT name FROM projects WHERE id = 2").fetchone() == ("Borealis Archive",)
    conn.close()
    assert (folder / "initial.original.db").is_file()
    assert store.read_json(SCENARIO, "data_changes.json")["changes"][0]["task_idx"] == 6
    quality = {t["task_idx"]: t for t in json.loads((folder / "quality.json").read_text())["tasks"]}
    assert all(quality[i]["verdict"] == "ok" and quality[i]["solvable"] == "yes" for i in (0, 4, 6))
    assert quality[7]["verdict"] == "unsolvable" and quality[7]["diagnosis"]["at_fault"] == "data"
    assert quality[7]["reason"].startswith("diagnosis (data at fault): The initial database already holds")
    shutil.rmtree(folder)
