"""Records of one episode (trajectory, per-step format verdicts, termination) and its score."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Termination = Literal["final_answer", "max_turns", "format_error", "environment_error", "policy_error"]
Outcome = Literal["completed", "partially_completed", "agent_error", "environment_error", "format_error"]


class ToolOutcome(BaseModel):
    """What the environment answered to one action (list_tools or call_tool)."""

    ok: bool
    status: int | None = None
    text: str = ""
    error_kind: str | None = None
    latency_ms: float = 0.0


class Step(BaseModel):
    """One model turn: its text, the format verdict and the environment's answer."""

    turn: int
    response: str
    user_turn: int = Field(default=0, description="index of the user message this turn answers (multi-turn episodes)")
    finish_reason: str | None = None
    format: dict[str, Any] = Field(description="StepCheck as a dict: ok, action, rule, detail, tool_name, arguments")
    tool: ToolOutcome | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0


class Episode(BaseModel):
    """A full rollout of one task; `messages` is the untruncated conversation."""

    scenario: str
    task_idx: int
    task: str
    policy: str
    window: int | None
    max_turns: int
    reasoning_rule: str = Field(default="required", description="the policy's <think> rule: required or optional")
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    termination: Termination | None = None
    termination_detail: str | None = None
    final_answer: str | None = None
    format_rule: str | None = None
    initial_db: str | None = None
    final_db: str | None = None
    wall_s: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def tool_calls(self) -> int:
        return sum(1 for s in self.steps if s.format.get("action") == "call_tool" and s.tool is not None)


class JudgeVerdict(BaseModel):
    """The judge's classification of an episode that ended normally, with its evidence and cost."""

    mode: Literal["code", "llm", "sql"]
    classification: Literal["Completed", "Partially Completed", "Agent Error", "Environment Error"]
    reasons: str
    verifier: dict[str, Any] | None = Field(default=None, description="VerifierOutcome as a dict, when one ran")
    judge_model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    judge_error: str | None = Field(default=None, description="why the judge could not classify (reply not JSON, ...)")


class EpisodeScore(BaseModel):
    """The reward of an episode, broadcast to every step, and how it was reached."""

    outcome: Outcome
    reward: float
    step_rewards: list[float]
    reasons: str
    judge: JudgeVerdict | None = None
