"""A scenario's tasks with their verifiers, read from the artifact store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from awm_resources.documents import CODE_FUNCTION, SQL_FUNCTION, TASKS_FILE, VERIFIERS_FILE, verifier_functions
from awm_resources.store import ArtifactStore


@dataclass
class TaskRecord:
    """One task and every verifier entry stored for it (a task can have a code and an sql one)."""

    scenario: str
    task_idx: int
    task: str
    verifiers: list[dict[str, Any]] = field(default_factory=list)

    def verifier_for(self, function: str) -> dict[str, Any] | None:
        """The first entry whose code defines `function` (by the stored `functions` list)."""
        for entry in self.verifiers:
            if entry.get("code") and function in _functions(entry):
                return entry
        return None

    def evidence_verifier(self) -> tuple[dict[str, Any], str] | None:
        """For the judge: the sql-mode verifier (evidence dict), else the code-mode one."""
        for function in (SQL_FUNCTION, CODE_FUNCTION):
            entry = self.verifier_for(function)
            if entry is not None:
                return entry, function
        return None

    @property
    def criteria(self) -> tuple[str | None, str | None]:
        for entry in self.verifiers:
            if entry.get("success_criteria") or entry.get("failure_criteria"):
                return entry.get("success_criteria"), entry.get("failure_criteria")
        return None, None


def _functions(entry: dict[str, Any]) -> list[str]:
    functions = entry.get("functions")
    if isinstance(functions, list) and functions:
        return functions
    return verifier_functions(entry.get("code") or "")


def entry_mode(entry: dict[str, Any]) -> Literal["code", "sql", "none"]:
    """`code` when the entry defines verify_task_completion, `sql` for verify_task only."""
    functions = _functions(entry) if entry.get("code") else []
    if CODE_FUNCTION in functions:
        return "code"
    if SQL_FUNCTION in functions:
        return "sql"
    return "none"


def load_tasks(store: ArtifactStore, scenario: str) -> list[TaskRecord]:
    """Every task of `scenario` with its verifier entries.

    Tasks come from tasks.json; a scenario imported without it (partial AWM data) takes the task
    texts its verifier entries carry. Raises FileNotFoundError when it has neither file.
    """
    has_tasks, has_verifiers = store.has(scenario, TASKS_FILE), store.has(scenario, VERIFIERS_FILE)
    if not has_tasks and not has_verifiers:
        raise FileNotFoundError(f"scenario {scenario!r} has neither tasks.json nor verifiers.json "
                                f"(looked in {store.scenario_dir(scenario)})")
    # Entries stay the file's dicts: typing them (VerifiersFile) costs 2.5x the JSON parse, on every load.
    entries = store.read_json(scenario, VERIFIERS_FILE).get("verifiers", []) if has_verifiers else []
    if has_tasks:
        tasks = store.tasks(scenario).tasks
    else:
        texts = {e["task_idx"]: e.get("task") or "" for e in entries if isinstance(e.get("task_idx"), int)}
        tasks = [texts.get(i, "") for i in range(max(texts, default=-1) + 1)]
    records = [TaskRecord(scenario=scenario, task_idx=i, task=t) for i, t in enumerate(tasks)]
    for entry in entries:
        idx = entry.get("task_idx")
        if isinstance(idx, int) and 0 <= idx < len(records):
            records[idx].verifiers.append(entry)
    return records


def load_task(store: ArtifactStore, scenario: str, task_idx: int) -> TaskRecord:
    records = load_tasks(store, scenario)
    if not 0 <= task_idx < len(records):
        raise IndexError(f"scenario {scenario!r} has {len(records)} tasks; task {task_idx} does not exist")
    return records[task_idx]
