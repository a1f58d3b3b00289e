"""The shapes the LLM must answer in, per stage (validated with pydantic; errors quote the output)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from awm_resources.sqlite_build import SampleTable, SchemaTable
from awm_rl.quality.solutions import ReferenceSolution

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


class ScenarioCandidate(BaseModel):
    name: str = Field(min_length=2, max_length=120)
    description: str = Field(min_length=20)
    category: str = Field(default="other", min_length=2, max_length=60)


class ScenarioCandidates(BaseModel):
    scenarios: list[ScenarioCandidate] = Field(min_length=1)


class TargetedScenarioCandidate(ScenarioCandidate):
    """A candidate of a targeted batch: also the kinds of task that exercise the weak skills."""

    task_styles: list[str] = Field(default_factory=list, max_length=8)


class TargetedScenarioCandidates(BaseModel):
    scenarios: list[TargetedScenarioCandidate] = Field(min_length=1)


class SuitabilityVerdict(BaseModel):
    name: str
    suitable: bool
    reason: str = ""
    category: str = ""  # one of the fixed list (synthesis.scenarios.CATEGORIES)


class SuitabilityVerdicts(BaseModel):
    verdicts: list[SuitabilityVerdict]


class TaskList(BaseModel):
    tasks: list[str] = Field(min_length=1)

    @field_validator("tasks")
    @classmethod
    def _non_empty(cls, tasks: list[str]) -> list[str]:
        stripped = [t.strip() for t in tasks]
        if any(not t for t in stripped):
            raise ValueError("a task is empty")
        if len(set(stripped)) != len(stripped):
            raise ValueError("tasks are not distinct")
        return stripped


class SchemaOutput(BaseModel):
    tables: list[SchemaTable] = Field(min_length=1)


class SampleOutput(BaseModel):
    tables: list[SampleTable] = Field(min_length=1)


class RequestParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "string"
    param_type: str = "query"
    required: bool = False
    description: str = ""

    @field_validator("param_type")
    @classmethod
    def _where(cls, v: str) -> str:
        if v not in ("query", "path", "body"):
            raise ValueError(f"param_type must be query, path or body, not {v!r}")
        return v


class Endpoint(BaseModel):
    model_config = ConfigDict(extra="allow")
    path: str
    method: str
    summary: str = ""
    description: str = ""
    operation_id: str
    tags: list[str] = Field(default_factory=list)
    request_params: dict[str, RequestParam] = Field(default_factory=dict)
    response: dict | list | str | None = None
    required_tables: list[str] = Field(default_factory=list)
    required_fields: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("operation_id")
    @classmethod
    def _snake(cls, v: str) -> str:
        if not SNAKE.match(v):
            raise ValueError(f"operation_id {v!r} is not snake_case")
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        v = v.upper()
        if v not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ValueError(f"unsupported HTTP method {v!r}")
        return v


class ApiGroup(BaseModel):
    model_config = ConfigDict(extra="allow")
    group_name: str
    endpoints: list[Endpoint] = Field(min_length=1)


class ApiSpec(BaseModel):
    api_groups: list[ApiGroup] = Field(min_length=1)

    def operation_ids(self) -> list[str]:
        return [ep.operation_id for g in self.api_groups for ep in g.endpoints]


class VerifierOutput(BaseModel):
    reasoning: str = ""
    success_criteria: str = ""
    failure_criteria: str = ""
    python_code: str = Field(min_length=20)
    # The tool calls that complete the task: run by the quality gate to prove the task solvable.
    reference_solution: ReferenceSolution | None = None


class SolutionOutput(ReferenceSolution):
    """A reference solution written on its own (`awm repair` of an imported environment)."""

    reasoning: str = ""
    # With at_fault "data": UPDATE/DELETE statements that take the task's target out of the seed data.
    data_change: list[str] = Field(default_factory=list)
