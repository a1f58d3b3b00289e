"""The JSON documents of the artifact store, typed: one model and one file name each.

Stages, the import, the quality gate, the catalog and the trainer exchange these files; a reader
parses them here instead of indexing dicts by string keys, so a field is defined in one place. The
models accept extra keys (stage metadata, importer fields, future additions) and keep them, and remember
the order keys came in: `dump(doc)` of a parsed file gives back the same JSON. A file that does not fit raises `DocumentError` naming the file and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_serializer, model_validator

# File names, relative to a scenario folder (the store's STAGE_FILES lists the stage artifacts among them).
SCENARIO_FILE = "scenario.json"
TASKS_FILE = "tasks.json"
VERIFIERS_FILE = "verifiers.json"
QUALITY_FILE = "quality.json"  # the quality gate's result (awm_rl.quality.gate)
AUDIT_FILE = "verifier_audit.json"  # the do-nothing audit (awm_rl.reward.audit)
# Relative to the store root.
CATALOG_FILE = "catalog.json"  # written by the environment_catalog asset; what training and evaluation read
DIFFICULTY_DIR = "difficulty"  # per-task outcome records: difficulty/<run>/<part>.json (awm_resources.difficulty)

CODE_FUNCTION = "verify_task_completion"  # code mode: returns {"result": "complete" | "others", ...}
SQL_FUNCTION = "verify_task"  # sql mode: returns evidence for an LLM judge
VERIFY_FUNCTIONS = re.compile(r"^\s*(?:async\s+)?def\s+(verify_task(?:_completion)?)\s*\(", re.M)

Number = int | float  # smart union: an int stays an int, so a parsed file dumps back byte for byte


def verifier_functions(code: str) -> list[str]:
    """The verifier entry points `code` defines (a text scan; nothing runs), completion mode first."""
    found = set(VERIFY_FUNCTIONS.findall(code))
    return [name for name in (CODE_FUNCTION, SQL_FUNCTION) if name in found]


class DocumentError(ValueError):
    """A store document that does not have the expected shape: names the file and the fields."""


class Document(BaseModel):
    """Tolerant of keys it does not declare (kept, and written back in place)."""

    # strict: a wrong type is an error, never coerced (a coerced value would not be written back as it came);
    # built on first use, not when the store imports this module.
    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)
    _order: tuple[str, ...] = PrivateAttr(default=())  # the keys in the order they came (written back so)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: Any) -> Any:
        doc = handler(data)
        if isinstance(data, dict) and isinstance(doc, Document):
            doc._order = tuple(data)
        return doc

    @model_serializer(mode="wrap")
    def _in_order(self, handler: Any) -> Any:
        out = handler(self)
        if not self._order or not isinstance(out, dict):
            return out
        return {**{k: out[k] for k in self._order if k in out}, **out}


class Scenario(Document):
    """`scenario.json`: written by synthesis (`synthesis.scenarios.register_accepted`) or the import."""

    name: str
    key: str | None = None  # the folder name is the key; stores built by hand may leave it out
    description: str | None = None
    category: str | None = None
    seed_batch: str | None = None
    source: str = "synthesized"  # "synthesized" | "imported"
    # a targeted scenario (`awm evolve`): the kinds of task it was proposed for, and the weaknesses it targets
    task_styles: list[str] | None = None
    targets: list[str] | None = None


class TaskList(Document):
    """`tasks.json`: the scenario's tasks; a task's index in the list is its `task_idx`."""

    tasks: list[str]


class VerifierEntry(Document):
    """One verifier of `verifiers.json` (the verifiers stage, or the import with `verification`)."""

    task_idx: int
    task: str | None = None
    file: str | None = None
    code: str
    functions: list[str] = Field(default_factory=list)
    verification: dict[str, Any] | None = None  # imported: the AWM record's verification object
    reasoning: str | None = None
    success_criteria: str | None = None
    failure_criteria: str | None = None
    reference_solution: dict[str, Any] | None = None  # awm_rl.quality.solutions.ReferenceSolution's fields
    raw_response: str | None = None


class VerifiersFile(Document):
    """`verifiers.json`: one or more entries per task."""

    verifiers: list[VerifierEntry]

    def for_task(self, task_idx: int) -> list[VerifierEntry]:
        return [v for v in self.verifiers if v.task_idx == task_idx]


class StageStatus(Document):
    """`status/<stage>.json`: what the last successful materialization (or import, or repair) recorded;
    the stage's numeric metadata (tasks, tables, tools, ...) are extra keys."""

    source: str | None = None
    attempts: int | None = None
    error_rate: Number | None = None
    degraded: bool | None = None
    valid: bool | None = None
    quality_ok: bool | None = None
    stage: str
    written_at: Number

    def metric(self, name: str, default: Any = 0) -> Any:
        """A value the stage recorded (declared or an extra key such as `tasks`), or `default`."""
        value = getattr(self, name, None)
        return default if value is None else value


class AttemptRecord(Document):
    """`attempts/<stage>/<n>.json`: one attempt of a stage (synthesis runner, or a repair's attempt 0)."""

    passed: bool | None = None
    error_rate: Number | None = None
    errors: dict[str, list[str]] = Field(default_factory=dict)
    error_summaries: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    prompt_hashes: dict[str, str] = Field(default_factory=dict)
    prompts: dict[str, Any] = Field(default_factory=dict)
    raw_responses: dict[str, Any] = Field(default_factory=dict)
    artifact: Any = None
    usage: dict[str, Number] = Field(default_factory=dict)
    elapsed_s: Number = 0.0
    source: str | None = None  # "stored": a repair's attempt 0
    attempt: int
    stage: str
    recorded_at: Number


class QualityTask(Document):
    """One task's verdict in a quality result."""

    task_idx: int
    eligible: bool
    verdict: str  # "ok" or one of awm_rl.quality.results.INELIGIBLE
    reason: str = ""
    solvable: str = "unverified"  # "yes" | "no" | "unverified"
    solution_detail: str | None = None


class QualityResult(Document):
    """`quality.json` (and one entry of the catalog report): the quality gate's result for a scenario;
    the per-status tool counts and per-verdict task counts not declared here are extra keys."""

    scenario: str
    digest: str | None = None
    judge: str | None = None
    file_stats: list[Any] = Field(default_factory=list)
    error: str | None = None
    tools_total: int = 0
    tools_ok: int = 0
    tools_server_error: int = 0
    tools_server_error_on_edge: int = 0
    tools_client_error_only: int = 0
    shadowed: int = 0
    tools: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tasks: list[QualityTask] = Field(default_factory=list)
    verifier_crash: int = 0
    eligible_tasks: int = 0


class CatalogEntry(Document):
    """One environment of `catalog.json` (`synthesis.catalog.catalog_entry`)."""

    name: str
    display_name: str | None = None
    category: str | None = None
    source: str = "synthesized"
    seed_batch: str | None = None
    tasks: int = 0
    tables: int = 0
    sample_rows: int = 0
    tools: int = 0
    lines_of_code: int = 0
    verifiers: int = 0
    excluded_tasks: list[int] = Field(default_factory=list)
    excluded_reasons: dict[str, str] = Field(default_factory=dict)
    trainable_tasks: int | None = None  # None: no quality gate or audit has checked the tasks
    tool_quality: dict[str, int] = Field(default_factory=dict)
    stages: list[str] = Field(default_factory=list)
    missing_stages: list[str] = Field(default_factory=list)
    invalid_stages: list[str] = Field(default_factory=list)
    degraded_stages: list[str] = Field(default_factory=list)
    ready: bool = True
    path: str | None = None
    digest: str | None = None  # the environment's version (awm_resources.provenance); None: never checked


class Catalog(Document):
    """`catalog.json`: the ready environments, and the others with why."""

    environments: list[CatalogEntry]
    not_ready: list[CatalogEntry] = Field(default_factory=list)
    digest: str | None = None  # the catalog's version (awm_resources.provenance.catalog_digest)

    def ready(self) -> list[CatalogEntry]:
        return [e for e in self.environments if e.ready]


WEAKNESSES_DIR = "weaknesses"  # relative to the store root: <evaluation run>.json and .png (awm_rl.evaluation.weaknesses)


class WeaknessGroup(Document):
    """What the policy failed at within one value of one dimension (category, task kind, tool kind, failure
    mode), with the failed episodes as evidence (`examples`: scenario, task_idx, task, mode, detail, episode)."""

    dimension: str
    key: str
    episodes: int
    failed: int
    fail_rate: Number
    modes: dict[str, int] = Field(default_factory=dict)
    examples: list[dict[str, Any]] = Field(default_factory=list)


class WeaknessReport(Document):
    """`weaknesses/<evaluation run>.json`: every group of one evaluation, and the weakest ones first."""

    evaluation: str  # the evaluation's output folder
    policy: str | None = None
    episodes: int
    failed: int
    groups: list[WeaknessGroup]
    weaknesses: list[WeaknessGroup]


class TaskTally(Document):
    """One task's rollouts in a difficulty part: outcome counts (an attempt is a scored rollout; a policy-side
    failure, e.g. a context overflow, is counted apart and is no attempt) and the turns they took."""

    scenario: str
    task_idx: int
    attempts: int = 0
    completed: int = 0
    partial: int = 0
    format_errors: int = 0
    environment_errors: int = 0
    agent_errors: int = 0
    policy_failures: int = 0
    turns: int = 0  # summed over the attempts (mean turns = turns / attempts)


class DifficultyPart(Document):
    """`difficulty/<run>/<part>.json`: per-task outcome counts of one evaluation run, or of one scored batch of a
    training step; each file is written once, atomically, by one process (readers merge them all)."""

    run: str
    source: str  # "evaluation" | "training"
    policy: str
    step: int | None = None  # the training step; None for an evaluation
    written_at: Number
    tasks: list[TaskTally]


# Every typed document of a scenario folder, by file name (status/ and attempts/ by folder: `document_model`).
SCENARIO_DOCUMENTS: dict[str, type[Document]] = {SCENARIO_FILE: Scenario, TASKS_FILE: TaskList,
                                                 VERIFIERS_FILE: VerifiersFile, QUALITY_FILE: QualityResult}


def document_model(relative: str) -> type[Document] | None:
    """The model of a file given by its path relative to a scenario folder, or None for other files."""
    parts = relative.split("/")
    if len(parts) == 2 and parts[0] == "status" and parts[1].endswith(".json"):
        return StageStatus
    if len(parts) == 3 and parts[0] == "attempts" and parts[2].endswith(".json"):
        return AttemptRecord
    return SCENARIO_DOCUMENTS.get(relative)


DocumentT = TypeVar("DocumentT", bound=Document)


def parse(model: type[DocumentT], data: Any, where: Path | str) -> DocumentT:
    """`data` (parsed JSON) as `model`; a mismatch is a DocumentError naming `where` and each bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
                           for e in exc.errors()[:5])
        raise DocumentError(f"{where} is not a valid {model.__name__} document: {fields}") from None


def read(model: type[DocumentT], path: Path) -> DocumentT:
    """The document at `path` (FileNotFoundError when absent; DocumentError when not JSON or not the model)."""
    try:
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path} is not JSON: {exc}") from None
    return parse(model, data, path)


def dump(doc: Document) -> dict[str, Any]:
    """The JSON-ready dict a document is written as: exactly the keys it was built or parsed with."""
    return doc.model_dump(mode="json", exclude_unset=True)
