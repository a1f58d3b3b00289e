"""The catalog's trainable tasks for the outside interfaces (TRL, verifiers): the same selection `awm train` makes.

The environments a run may use are the ready ones of `catalog.json`, or of a kept catalog version
(`catalog_versions/<digest>.json`, checked unchanged first); their tasks are those the judge can score and the
verifier audit kept (`awm_rl.training.tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from awm_resources.provenance import CatalogVersionError, catalog_digest, catalog_version_path, verify_catalog_version
from awm_resources.store import ArtifactStore
from awm_rl.reward.tasks import TaskRecord


class IntegrationError(RuntimeError):
    """The catalog, a task or a tool cannot be offered through an outside interface: the message says which."""


@dataclass
class CatalogTasks:
    """Scenario -> its trainable tasks, in a stable order, and the catalog digest they came from."""

    store: ArtifactStore
    tasks: dict[str, list[TaskRecord]]
    catalog_digest: str
    catalog_path: Path
    excluded: dict[str, list[int]] = field(default_factory=dict)

    @property
    def scenarios(self) -> list[str]:
        return list(self.tasks)

    def all_tasks(self) -> list[TaskRecord]:
        return [r for s in self.tasks for r in self.tasks[s]]

    def task(self, scenario: str, task_idx: int) -> TaskRecord:
        """One trainable task; a scenario or task the selection does not hold is an IntegrationError naming it."""
        if scenario not in self.tasks:
            raise IntegrationError(f"environment {scenario!r} is not among the selected catalog environments "
                                   f"{self.scenarios}")
        for record in self.tasks[scenario]:
            if record.task_idx == task_idx:
                return record
        raise IntegrationError(f"task {task_idx} of {scenario!r} is not trainable here (trainable: "
                               f"{[r.task_idx for r in self.tasks[scenario]]}; left out: {self.excluded.get(scenario, [])})")


def catalog_tasks(store_root: Path | str | None = None, *, catalog_version: str | None = None,
                  scenarios: list[str] | None = None, judge_mode: str = "code",
                  max_tasks_per_scenario: int | None = None) -> CatalogTasks:
    """The catalog's (or a kept version's) ready environments, narrowed to `scenarios`, with their trainable tasks."""
    from awm_rl.training import tasks as T

    store = ArtifactStore(store_root)
    try:
        path = catalog_version_path(store, catalog_version) if catalog_version else store.catalog_path
        entries, _ = T.read_catalog(store, path)
        names = T.select_environments(entries, scenarios, None)
        if catalog_version:
            verify_catalog_version(store, catalog_version, names)
        excluded = T.audit_exclusions(store, names, "catalog", entries)
        records = T.training_tasks(store, names, judge_mode=judge_mode, excluded=excluded,
                                   max_tasks_per_scenario=max_tasks_per_scenario)
    except (T.CatalogError, CatalogVersionError) as exc:
        raise IntegrationError(str(exc)) from None
    by_scenario: dict[str, list[TaskRecord]] = {}
    for record in records:
        by_scenario.setdefault(record.scenario, []).append(record)
    return CatalogTasks(store=store, tasks=by_scenario, catalog_digest=catalog_digest(entries), catalog_path=Path(path),
                        excluded=excluded)
