"""`awm bench repair --json`: the repair loop (`awm repair`) on recorded runs, replayed offline.

Each case builds a store in a temporary folder, runs `repair_scenario` with the replay model on the
case's recordings, and reports what the loop spent and reached:

- `doordash`: the corpus' doordash_drive_delivery_tracking (../shared/awm-corpus/generated), env code
  and task 0's solution (tests/quality/recordings; written for the tests, not a real model's answers);
- `vacuous_verifier`: the quality tests' hand-written environment, task 1's vacuous verifier regenerated;
- `verifier_at_fault`: the same environment with a verifier that reads only the initial database (task
  4) and two tasks whose target is already in the seed data (6 and 7): a clean run diagnosed against the
  verifier regenerates it; task 6's data change is kept, task 7's (it would break task 0) is refused and
  its diagnosis becomes the task's reason. Recordings written by hand (their first line says so), not a
  real model's answers.

Per case: LLM calls per phase (answers and error summaries), attempts per phase, generations per
verifier (the stored one counts as none), data changes kept, tasks proven solvable before and after,
and the reason of every task still excluded.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awm_resources.store import PROJECT_ROOT, ArtifactStore

RECORDINGS = PROJECT_ROOT / "tests" / "quality" / "recordings"
CORPUS = PROJECT_ROOT.parent / "shared" / "awm-corpus" / "generated"
QUALITY_TESTS = PROJECT_ROOT / "tests" / "quality" / "conftest.py"

READS_INITIAL_ONLY = '''
import sqlite3


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(f"file:{initial_db_path}?mode=ro", uri=True)
    n = conn.execute("SELECT COUNT(*) FROM projects WHERE name = 'Zephyr'").fetchone()[0]
    conn.close()
    return {"result": "complete" if n == 1 else "others", "zephyr_in_initial": n}
'''
ONE_MORE_PROJECT = '''
import sqlite3


def _n(path):
    conn = sqlite3.connect(f"file:{{path}}?mode=ro", uri=True)
    n = conn.execute("SELECT COUNT(*) FROM projects WHERE name = '{name}' AND region = '{region}'").fetchone()[0]
    conn.close()
    return n


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    return {{"result": "complete" if _n(final_db_path) > _n(initial_db_path) else "others"}}
'''


def _quality_tests() -> Any:
    """The quality tests' hand-written environment (tests/quality/conftest.py), loaded by path."""
    if not QUALITY_TESTS.is_file():
        raise FileNotFoundError(f"awm bench repair needs the repository's {QUALITY_TESTS}")
    spec = importlib.util.spec_from_file_location("_awm_quality_tests", QUALITY_TESTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_schema(folder: Path) -> None:
    """schema.json from the initial database (the verifier prompts show the schema)."""
    conn = sqlite3.connect(folder / "initial.db")
    tables = [{"name": n, "ddl": sql, "indexes": []} for n, sql in
              conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    conn.close()
    (folder / "schema.json").write_text(json.dumps({"tables": tables}))


def hand_written(root: Path) -> tuple[ArtifactStore, str]:
    tests = _quality_tests()
    _with_schema(tests.write_scenario(root))
    return ArtifactStore(root), tests.SCENARIO


def verifier_at_fault(root: Path) -> tuple[ArtifactStore, str]:
    """The hand-written environment with task 4's verifier reading only the initial database and tasks 6
    and 7 whose targets the seed data already holds (under unique names)."""
    store, scenario = hand_written(root)
    folder = store.scenario_dir(scenario)
    tasks = json.loads((folder / "tasks.json").read_text())["tasks"]
    tasks[4] = "Create a project named 'Zephyr' in region EU-WEST."
    seeded = [("Borealis", "EU-WEST"), ("Apollo", "NA-EAST")]
    tasks += [f"Create a project named '{name}' in region {region}." for name, region in seeded]
    (folder / "tasks.json").write_text(json.dumps({"tasks": tasks}))
    entries = json.loads((folder / "verifiers.json").read_text())["verifiers"]
    entries[4] = {**entries[4], "task": tasks[4], "code": READS_INITIAL_ONLY}
    entries += [{"task_idx": 6 + i, "task": tasks[6 + i], "code": ONE_MORE_PROJECT.format(name=name, region=region),
                 "functions": ["verify_task_completion"]} for i, (name, region) in enumerate(seeded)]
    (folder / "verifiers.json").write_text(json.dumps({"verifiers": entries}))
    return store, scenario


def doordash(root: Path) -> tuple[ArtifactStore, str]:
    from awm_resources.interop import import_awm_dir

    if not CORPUS.is_dir():
        raise FileNotFoundError(f"the AWM corpus is missing at {CORPUS}")
    store = ArtifactStore(root)
    import_awm_dir(CORPUS, store)
    return store, "doordash_drive_delivery_tracking"


# name -> (builder, repair_scenario options, where the recordings come from)
CASES: dict[str, tuple[Callable[[Path], tuple[ArtifactStore, str]], dict[str, Any], str]] = {
    "doordash": (doordash, {"phases": ("env_code", "solutions"), "tasks": [0], "max_attempts": 2},
                 "tests/quality/recordings: written for the tests, not a real model's answers"),
    "vacuous_verifier": (hand_written, {"phases": ("verifiers",), "tasks": [1], "max_attempts": 2},
                         "tests/quality/recordings: written for the tests, not a real model's answers"),
    "verifier_at_fault": (verifier_at_fault, {"phases": ("solutions",), "tasks": [4, 6, 7], "max_attempts": 1},
                          "tests/quality/recordings: written by hand (issue 22), not a real model's answers"),
}
PHASE_OF_STAGE = {"env_code_repair": "env_code", "verifiers_repair": "verifiers", "solutions": "solutions"}


def run_case(name: str, root: Path) -> dict[str, Any]:
    from awm_assets.synthesis.repair import repair_scenario
    from awm_resources.llm import LLMClient

    build, options, source = CASES[name]
    store, scenario = build(root)
    llm = LLMClient(replay_dir=RECORDINGS)
    started = time.perf_counter()
    report = repair_scenario(store, llm, scenario, log_fn=lambda _m: None, **options)
    elapsed = time.perf_counter() - started
    quality = store.read_json(scenario, "quality.json")
    return {"case": name, "scenario": scenario, "recordings": source, "error": report.get("error"),
            "calls_per_phase": calls_per_phase(llm.ledger),
            "attempts_per_phase": {p: o.get("attempts") for p, o in report["phases"].items() if o.get("needed")},
            "verifier_generations": verifier_generations(llm.ledger),
            "data_changes_kept": (report["phases"].get("solutions", {}).get("metrics") or {}).get("data_changes", 0),
            "tasks_proven": {"before": report["before"]["solvable_yes"], "after": report["after"]["solvable_yes"]},
            "tools_server_error": {"before": report["before"]["tools_server_error"],
                                   "after": report["after"]["tools_server_error"]},
            "excluded": {str(t["task_idx"]): f"{t['verdict']}: {t['reason'][:300]}"
                         for t in quality["tasks"] if not t["eligible"] and (not options.get("tasks")
                                                                              or t["task_idx"] in options["tasks"])},
            "elapsed_s": round(elapsed, 2)}


def calls_per_phase(ledger: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per repair phase, the LLM answers and the error summaries asked for."""
    out: dict[str, Counter] = {}
    for row in ledger:
        phase = PHASE_OF_STAGE.get(row["stage"], row["stage"])
        kind = "summaries" if (row.get("item") or "").endswith("summary") or row["stage"].endswith("summary") else "answers"
        out.setdefault(phase, Counter())[kind] += 1
    return {p: dict(c) for p, c in out.items()}


def verifier_generations(ledger: list[dict[str, Any]]) -> dict[str, int]:
    """Per task, how many verifiers the LLM wrote (regenerated in the verifiers phase, or from a diagnosis)."""
    out: Counter = Counter()
    for row in ledger:
        item = row.get("item") or ""
        if row["stage"] == "verifiers_repair" and item.startswith("task_") and "." not in item:
            out[item] += 1
        elif row["stage"] == "solutions" and item.endswith(".verifier"):
            out[item.split(".")[0]] += 1
    return dict(sorted(out.items()))


def run(cases: list[str]) -> dict[str, Any]:
    rows = []
    for name in cases:
        root = Path(tempfile.mkdtemp(prefix=f"awm-bench-repair-{name}-"))
        try:
            rows.append(run_case(name, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {"benchmark": "repair", "replayed": True, "cases": rows,
            "totals": {"llm_calls": sum(sum(c.values()) for r in rows for c in r["calls_per_phase"].values()),
                       "tasks_proven_after": sum(r["tasks_proven"]["after"] for r in rows),
                       "tasks_proven_before": sum(r["tasks_proven"]["before"] for r in rows)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="awm bench repair", description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=sorted(CASES), help="a case to run (repeatable; default: all)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        out = run(args.case or list(CASES))
    except FileNotFoundError as exc:
        print(f"awm bench repair: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        for r in out["cases"]:
            print(f"{r['case']}: calls {r['calls_per_phase']}, attempts {r['attempts_per_phase']}, verifier "
                  f"generations {r['verifier_generations']}, proven {r['tasks_proven']['before']} -> "
                  f"{r['tasks_proven']['after']}, excluded {r['excluded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
