"""The code-augmented judge (paper point 10): classify an episode that ended normally.

Modes:
- `code`: the task's code-mode verifier alone (`verify_task_completion`): complete -> Completed,
  others -> Agent Error. Needs no LLM, so it works offline.
- `llm`: an LLM judge sees the task and the (trimmed) trajectory, no verifier evidence.
- `sql`: the LLM judge also gets the verifier's evidence (the sql-mode `verify_task` dict, or the
  code-mode result where a task has only that) and the verifier's success/failure criteria.

The LLM answers JSON `{"classification": "Completed" | "Partially Completed" | "Agent Error" |
"Environment Error", "reasons": str}`, validated; one corrective retry, then the failure is the
verdict (Environment Error, reason stored in `judge_error`). Verifiers run batched in the
sandbox (`awm_rl.isolation.verification.run_verifiers`); LLM calls run concurrently; tokens and cost are
recorded per verdict.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel

from awm_resources.llm import quote
from awm_rl.agent.episode import Episode, JudgeVerdict
from awm_rl.isolation.verification import VerifierJob, VerifierOutcome, run_verifiers
from awm_rl.reward.tasks import CODE_FUNCTION, TaskRecord

JudgeMode = Literal["code", "llm", "sql"]
Classification = Literal["Completed", "Partially Completed", "Agent Error", "Environment Error"]


class JudgeReply(BaseModel):
    classification: Classification
    reasons: str


JUDGE_SYSTEM = """You judge whether an AI agent completed a task in a stateful web application that it \
operated through API tools on behalf of user id 1. Classify the episode as exactly one of:
- "Completed": every requirement of the task is met in the final state (and any requested information was reported).
- "Partially Completed": some but not all requirements are met.
- "Agent Error": the task is not done because of the agent (wrong tool, wrong arguments, gave up, wrong answer).
- "Environment Error": the task could not be done because the environment misbehaved (server errors, broken tools, data that makes the task impossible).
{evidence_rules}Answer with one JSON object and nothing else:
{{"classification": "<one of the four>", "reasons": "<two to five sentences citing what you saw>"}}"""

EVIDENCE_RULES = """You also get the output of a verification program that compared the database before and \
after the episode, and the criteria for reading it. Trust the database evidence over the agent's own claims.
"""


def trim(text: str, limit: int) -> str:
    """At most about `limit` characters: the start and the end, the cut said."""
    half = max(limit // 2 - 20, 0)
    return quote(text, head=half, tail=half)


def render_trajectory(episode: Episode, max_chars: int = 24_000, per_message: int = 1_500) -> str:
    """The trajectory as text for the judge, trimmed to fit: long messages and middle turns are cut."""
    blocks = []
    for step in episode.steps:
        lines = [f"## Turn {step.turn + 1}", f"Agent: {trim(step.response.strip(), per_message)}"]
        if step.tool is not None:
            lines.append(f"Environment (status {step.tool.status}): {trim(step.tool.text.strip(), per_message)}")
        blocks.append("\n".join(lines))
    ending = f"## Episode ended: {episode.termination}"
    if episode.termination_detail:
        ending += f" ({trim(episode.termination_detail, 300)})"
    total = sum(len(b) for b in blocks)
    if total > max_chars and len(blocks) > 3:
        keep_head = blocks[:2]
        budget = max_chars - sum(len(b) for b in keep_head)
        tail: list[str] = []
        for block in reversed(blocks[2:]):
            if budget - len(block) < 0 and tail:
                break
            tail.insert(0, block)
            budget -= len(block)
        omitted = len(blocks) - len(keep_head) - len(tail)
        blocks = keep_head + ([f"[... {omitted} turns omitted ...]"] if omitted else []) + tail
    return "\n\n".join(blocks + [ending])


def judge_messages(mode: JudgeMode, record: TaskRecord, episode: Episode, evidence: dict[str, Any] | None,
                   max_chars: int = 24_000) -> list[dict[str, str]]:
    """The judge prompt. `evidence` is the verifier's output (sql mode only)."""
    system = JUDGE_SYSTEM.format(evidence_rules=EVIDENCE_RULES if mode == "sql" else "")
    parts = [f"# Task\n{record.task}", f"# Trajectory\n{render_trajectory(episode, max_chars)}"]
    if episode.final_answer:
        parts.append(f"# Agent's final answer\n{trim(episode.final_answer, 2_000)}")
    if mode == "sql":
        success, failure = record.criteria
        parts.append("# Verification output\n" + trim(json.dumps(evidence, ensure_ascii=False, indent=1, default=str), 12_000))
        if success:
            parts.append(f"# Success criteria\n{success}")
        if failure:
            parts.append(f"# Failure criteria\n{failure}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


class Judge:
    """Classifies episodes in one mode; `llm` is an `awm_resources.llm.LLMClient` (llm and sql modes)."""

    def __init__(self, mode: JudgeMode = "code", *, llm: Any | None = None, timeout_s: float = 10,
                 memory_mb: int = 512, concurrency: int = 8, max_trajectory_chars: int = 24_000) -> None:
        if mode not in ("code", "llm", "sql"):
            raise ValueError(f"judge mode must be code, llm or sql, got {mode!r}")
        if mode != "code" and llm is None:
            raise ValueError(f"judge mode {mode!r} needs an LLM client (judge resource); use mode 'code' offline")
        self.mode: JudgeMode = mode
        self.llm = llm
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.concurrency = concurrency
        self.max_trajectory_chars = max_trajectory_chars

    # -- public ------------------------------------------------------------------------------------
    def judge(self, episode: Episode, record: TaskRecord) -> JudgeVerdict:
        return self.judge_many([(episode, record)])[0]

    def judge_many(self, items: list[tuple[Episode, TaskRecord]]) -> list[JudgeVerdict]:
        """Verifiers for all items in one sandbox batch, then LLM calls concurrently; input order kept."""
        outcomes = self._run_verifiers(items)
        if self.mode == "code":
            return [self._code_verdict(out) for out in outcomes]
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(items)))) as pool:
            triples = [(e, r, o) for (e, r), o in zip(items, outcomes, strict=True)]
            return list(pool.map(lambda args: self._llm_verdict(*args), triples))

    async def ajudge_many(self, items: list[tuple[Episode, TaskRecord]]) -> list[JudgeVerdict]:
        """`judge_many` off the event loop (the rollout loop keeps going while judging)."""
        return await asyncio.to_thread(self.judge_many, items)

    # -- verifiers ---------------------------------------------------------------------------------
    def _run_verifiers(self, items: list[tuple[Episode, TaskRecord]]) -> list[VerifierOutcome | str | None]:
        """Per item: the verifier outcome, a string saying why none could run, or None (llm mode)."""
        results: list[VerifierOutcome | str | None] = [None] * len(items)
        if self.mode == "llm":
            return results
        jobs: list[VerifierJob] = []
        where: list[int] = []
        for i, (episode, record) in enumerate(items):
            if self.mode == "code":
                entry, function = record.verifier_for(CODE_FUNCTION), CODE_FUNCTION
                found = (entry, function) if entry else None
            else:
                found = record.evidence_verifier()
            if found is None:
                wanted = "code-mode (verify_task_completion)" if self.mode == "code" else "any"
                results[i] = f"task {record.task_idx} of {record.scenario!r} has no {wanted} verifier"
                continue
            if not episode.initial_db or not episode.final_db:
                results[i] = "the episode has no database snapshot to verify"
                continue
            entry, function = found
            jobs.append(VerifierJob(code=entry["code"], initial_db=episode.initial_db, final_db=episode.final_db,
                                    function=function, final_answer=episode.final_answer))
            where.append(i)
        workers = 2 if len(jobs) >= 8 else 1
        for i, outcome in zip(where, run_verifiers(jobs, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                                                   workers=workers), strict=True):
            results[i] = outcome
        return results

    @staticmethod
    def _code_verdict(outcome: VerifierOutcome | str | None) -> JudgeVerdict:
        if not isinstance(outcome, VerifierOutcome):
            return JudgeVerdict(mode="code", classification="Environment Error", reasons=str(outcome))
        dumped = outcome.model_dump()
        if not outcome.ok:
            return JudgeVerdict(mode="code", classification="Environment Error", verifier=dumped,
                                reasons=f"the verifier failed ({outcome.error_kind}): {outcome.error}")
        if outcome.verdict == "complete":
            return JudgeVerdict(mode="code", classification="Completed", verifier=dumped,
                                reasons="the verifier reports the task complete")
        return JudgeVerdict(mode="code", classification="Agent Error", verifier=dumped,
                            reasons=f"the verifier reports the task not complete: {json.dumps(outcome.result)[:500]}")

    # -- LLM ---------------------------------------------------------------------------------------
    def _llm_verdict(self, episode: Episode, record: TaskRecord, outcome: VerifierOutcome | str | None) -> JudgeVerdict:
        from awm_resources.llm import CallTag, LLMError, LLMOutputError, parse_model

        evidence: dict[str, Any] | None = None
        dumped = outcome.model_dump() if isinstance(outcome, VerifierOutcome) else None
        if self.mode == "sql":
            if isinstance(outcome, VerifierOutcome):
                evidence = outcome.result if outcome.ok else {"verifier_error": outcome.error_kind, "detail": outcome.error}
            else:
                evidence = {"verifier_unavailable": outcome}
        messages = judge_messages(self.mode, record, episode, evidence, self.max_trajectory_chars)
        verdict = JudgeVerdict(mode=self.mode, classification="Environment Error", reasons="", verifier=dumped,
                               judge_model=getattr(self.llm, "model", None))
        for attempt in (1, 2):
            tag = CallTag(stage=f"judge_{self.mode}", scenario=record.scenario, item=f"t{record.task_idx}", attempt=attempt)
            try:
                response = self.llm.chat(messages, tag=tag)  # type: ignore[union-attr]  # llm modes have one (__init__)
            except LLMError as exc:
                verdict.judge_error = f"judge call failed: {exc}"
                break
            verdict.prompt_tokens += response.prompt_tokens
            verdict.completion_tokens += response.completion_tokens
            verdict.cost_usd += response.cost_usd
            try:
                reply = parse_model(response.text, JudgeReply)
            except LLMOutputError as exc:
                verdict.judge_error = f"judge reply rejected (attempt {attempt}): {str(exc)[:1500]}"
                messages = messages + [
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": "Your reply was not a valid JSON object with 'classification' "
                     "(one of Completed, Partially Completed, Agent Error, Environment Error) and 'reasons'. "
                     "Answer again with only that JSON object."},
                ]
                continue
            verdict.classification, verdict.reasons, verdict.judge_error = reply.classification, reply.reasons, None
            return verdict
        verdict.reasons = f"no usable judge verdict: {verdict.judge_error}"
        return verdict
