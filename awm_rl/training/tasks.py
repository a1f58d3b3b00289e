"""Training tasks: the environment catalog (filtered), its verified tasks, and the per-step schedule.

The trainer reads only `catalog.json` (written by the `environment_catalog` asset) and the task
and verifier files of the environments it lists. Tasks whose verifier the judge cannot use, or
that fail the do-nothing audit (a verifier that passes when nothing was done would reward
idleness), are left out. The schedule fixes, before training, which tasks each step runs, so the
trainer can prepare the next step's environment instances while the current step trains.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awm_resources.documents import Catalog, CatalogEntry, DocumentError, parse
from awm_resources.store import ArtifactStore
from awm_rl.reward.tasks import TaskRecord, load_tasks


class CatalogError(RuntimeError):
    """No usable catalog or no trainable task: the message says what is missing and where."""


@dataclass
class CatalogVersion:
    """What a run trained on, for lineage: the catalog file, its content hash and the environments."""

    path: str
    sha256: str
    environments: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "environments": self.environments}


def read_catalog(store: ArtifactStore, catalog_path: Path | None = None) -> tuple[list[CatalogEntry], CatalogVersion]:
    """The ready environments of the catalog file, and its version."""
    path = Path(catalog_path) if catalog_path else store.catalog_path
    if not path.is_file():
        raise CatalogError(f"no environment catalog at {path}: run `awm catalog --refresh` (or materialize "
                           "`environment_catalog` in the UI) after `awm synth` or `awm import`, then train")
    raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("environments"), list):
        raise CatalogError(f"{path} has no `environments` list")
    try:
        ready = parse(Catalog, doc, path).ready()
    except DocumentError as exc:
        raise CatalogError(str(exc)) from None
    return ready, CatalogVersion(str(path), hashlib.sha256(raw).hexdigest(), sorted(e.name for e in ready))


def select_environments(entries: list[CatalogEntry], scenarios: list[str] | None,
                        max_scenarios: int | None, if_not_ready: str = "error") -> list[str]:
    """The environments to train on. Named ones that the catalog does not have ready are an error, or with
    `if_not_ready="use_catalog"` (a config's default list, e.g. tiny-cpu's) the catalog's ready ones instead."""
    names = sorted(e.name for e in entries)
    if scenarios:
        missing = [s for s in scenarios if s not in names]
        if missing and if_not_ready != "use_catalog":
            raise CatalogError(f"environments {missing} are not ready in the catalog (ready: {', '.join(names) or 'none'})")
        if not missing:
            names = list(scenarios)
        else:
            max_scenarios = max_scenarios or len(scenarios)
    if max_scenarios:
        names = names[:max_scenarios]
    if not names:
        raise CatalogError("the catalog lists no ready environment to train on")
    return names


def judge_can_use(record: TaskRecord, mode: str) -> bool:
    """Code mode needs a code-mode verifier; llm needs none; sql uses any verifier for evidence."""
    if mode == "code":
        return record.verifier_for("verify_task_completion") is not None
    if mode == "sql":
        return record.evidence_verifier() is not None
    return True


def audit_exclusions(store: ArtifactStore, scenarios: list[str], how: str,
                     entries: list[CatalogEntry] | None = None) -> dict[str, list[int]]:
    """Tasks to leave out per scenario because their verifier failed the do-nothing audit.

    `catalog`: the catalog entries' `excluded_tasks` (the catalog asset runs the audit), auditing
    now only the environments whose entry has no audit; `run`: audit now; `stored`: the
    `verifier_audit.json` files; `off`: keep every task.
    """
    from awm_rl.reward.audit import AUDIT_FILE, AuditEntry, audit_verifiers, excluded_tasks

    if how == "off":
        return {}
    if how == "catalog":
        audited = {e.name: list(e.excluded_tasks) for e in entries or [] if e.trainable_tasks is not None}
        out = {s: audited[s] for s in scenarios if audited.get(s)}
        missing = [s for s in scenarios if s not in audited]
        if missing:
            out.update(excluded_tasks(audit_verifiers(store, missing)))
        return out
    if how == "run":
        return excluded_tasks(audit_verifiers(store, scenarios))
    found: list[AuditEntry] = []
    for scenario in scenarios:
        path = store.path(scenario, AUDIT_FILE)
        if not path.is_file():
            raise CatalogError(f"environments.verifier_audit is 'stored' but {path} does not exist "
                               "(materialize environment_catalog, or set verifier_audit: catalog / run)")
        found += [AuditEntry.model_validate(e) for e in json.loads(path.read_text(encoding="utf-8"))["entries"]]
    return excluded_tasks(found)


def training_tasks(store: ArtifactStore, scenarios: list[str], *, judge_mode: str, excluded: dict[str, list[int]],
                   max_tasks_per_scenario: int | None = None) -> list[TaskRecord]:
    """Every trainable task of `scenarios`, in a stable order."""
    tasks: list[TaskRecord] = []
    for scenario in scenarios:
        skip = set(excluded.get(scenario, []))
        usable = [r for r in load_tasks(store, scenario) if r.task_idx not in skip and judge_can_use(r, judge_mode)]
        tasks += usable[:max_tasks_per_scenario] if max_tasks_per_scenario else usable
    if not tasks:
        raise CatalogError(f"no trainable task in {scenarios}: every task lacks a verifier usable by judge mode "
                           f"{judge_mode!r} or failed the verifier audit ({excluded})")
    return tasks


def step_schedule(tasks: list[TaskRecord], steps: int, tasks_per_step: int, seed: int) -> list[list[TaskRecord]]:
    """The tasks of each step: shuffled epochs over `tasks`, cut into steps of `tasks_per_step`."""
    rng = random.Random(seed)
    order: list[TaskRecord] = []
    while len(order) < steps * tasks_per_step:
        epoch = list(tasks)
        rng.shuffle(epoch)
        order += epoch
    return [order[i * tasks_per_step:(i + 1) * tasks_per_step] for i in range(steps)]


def dataset_rows(schedule: list[list[TaskRecord]]) -> list[dict[str, Any]]:
    """One row per scheduled task, in step order (the trainer reads them without shuffling)."""
    return [{"prompt": [{"role": "user", "content": r.task}], "scenario": r.scenario, "task_idx": r.task_idx,
             "task": r.task} for step in schedule for r in step]
