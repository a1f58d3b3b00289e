"""The self-correction loop of one stage attempt, free of Dagster.

An attempt generates (LLM), parses, executes and measures an error rate. At or under the stage's
threshold the artifact is committed to the store. Above it, the error is summarised by the LLM, the
attempt is recorded, and `AttemptFailed` asks the caller (a Dagster asset under a RetryPolicy) for a
retry, whose prompt will carry the summaries. On the last attempt the recorded attempt with the lowest
error rate is committed instead, marked degraded. Our own bugs surface as other exceptions, which the
asset turns into non-retryable failures so they never burn LLM retries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from awm_assets.synthesis import prompts
from awm_assets.synthesis.config import SynthesisConfig
from awm_resources.llm import CallTag, LLMClient, LLMConfigError, LLMError, LLMOutputError, ReplayMissingError, quote
from awm_resources.store import ArtifactStore

log = logging.getLogger(__name__)


class AttemptFailed(Exception):
    """The generated artifact missed the threshold; a retry with the error summary may fix it."""

    def __init__(self, stage: str, scenario: str, attempt: int, error_rate: float, summary: str):
        self.stage, self.scenario, self.attempt, self.error_rate, self.summary = stage, scenario, attempt, error_rate, summary
        super().__init__(f"{stage} for {scenario!r}: attempt {attempt} failed with error rate "
                         f"{error_rate:.0%}; summary for the next attempt:\n{summary}")


class StageExhausted(Exception):
    """Every attempt failed and none produced a usable artifact."""


@dataclass
class AttemptContext:
    store: ArtifactStore
    llm: LLMClient
    scenario: str
    attempt: int
    max_attempts: int
    previous: list[dict[str, Any]]  # attempt records of this run, oldest first
    settings: SynthesisConfig = field(default_factory=SynthesisConfig)

    def tag(self, stage: str, item: str | None = None) -> CallTag:
        return CallTag(stage=stage, scenario=self.scenario, item=item, attempt=self.attempt)

    def corrections(self, item: str | None = None) -> list[str]:
        """Error summaries of earlier attempts, for the item (None = the whole stage), each followed by the
        errors themselves (cut) where the summary does not quote them: a summary may drop the details the
        model needs (a solution's calls and answers, the verifier's returned dict)."""
        key = item or "_"
        out = []
        for r in self.previous:
            summary = (r.get("error_summaries") or {}).get(key)
            if summary is None:
                continue
            raw = "\n".join((r.get("errors") or {}).get(key, []))
            if raw and raw not in summary:
                summary += f"\n\nThe errors as we saw them:\n{quote(raw, head=3000, tail=1000)}"
            out.append(summary)
        return out


@dataclass
class AttemptResult:
    artifact: Any | None  # JSON-serialisable; None when nothing usable was produced
    error_rate: float
    errors: dict[str, list[str]] = field(default_factory=dict)  # item ("_" = whole stage) -> error lines
    metrics: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, list[dict]] = field(default_factory=dict)  # item -> messages sent
    responses: dict[str, str] = field(default_factory=dict)  # item -> raw model text
    excerpts: dict[str, str] = field(default_factory=dict)  # item -> artifact text shown to the summariser


class StageSpec(Protocol):
    name: str
    threshold: float

    def attempt(self, ctx: AttemptContext) -> AttemptResult: ...

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]: ...


@dataclass
class StageOutcome:
    stage: str
    scenario: str
    attempts: int
    error_rate: float
    degraded: bool
    metadata: dict[str, Any]
    history: list[dict[str, Any]]


def _hash(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def summarize_errors(ctx: AttemptContext, stage: str, item: str | None, errors: list[str], excerpt: str) -> str:
    """The paper's 200-500 token error summary; falls back to the raw error text if the LLM can't answer."""
    error_text = quote("\n".join(errors), head=4000, tail=1000)
    tag_item = f"{item}.summary" if item else "summary"
    try:
        return ctx.llm.chat(prompts.error_summary(stage, error_text, quote(excerpt, 6000, 2000)),
                            tag=ctx.tag(stage, tag_item)).text.strip()
    except (LLMError, ReplayMissingError) as exc:
        log.warning("error summary unavailable for %s/%s (%s); using the raw error text", stage, item, exc)
        return f"(raw errors; no LLM summary: {exc.__class__.__name__})\n{error_text}"


def run_attempt(spec: StageSpec, ctx: AttemptContext, log_fn: Callable[[str], None] = log.info) -> StageOutcome:
    """Run attempt `ctx.attempt` of `spec`; commit, raise AttemptFailed, or commit the best degraded attempt."""
    store, key, stage = ctx.store, ctx.scenario, spec.name
    started = time.perf_counter()
    usage_before = ctx.llm.usage(stage=stage, scenario=key)
    try:
        result = spec.attempt(ctx)
    except (ReplayMissingError, LLMConfigError):  # no next attempt can do better: the stage fails as configured
        raise
    except (LLMOutputError, LLMError) as exc:
        text = getattr(exc, "text", "") or ""
        result = AttemptResult(artifact=None, error_rate=1.0, errors={"_": [str(exc)]},
                               responses={"_": text}, excerpts={"_": text})
    passed = result.artifact is not None and result.error_rate <= spec.threshold
    summaries: dict[str, str] = {}
    if not passed:
        for item, errs in result.errors.items():
            if errs and ctx.attempt >= ctx.max_attempts:  # no next attempt to read a summary: no call for one
                summaries[item] = "(last attempt: no summary asked for)\n" + quote("\n".join(errs), head=4000, tail=1000)
            elif errs:
                summaries[item] = summarize_errors(ctx, stage, None if item == "_" else item, errs,
                                                   result.excerpts.get(item, result.responses.get(item, "")))
    usage_after = ctx.llm.usage(stage=stage, scenario=key)
    usage = {k: round(usage_after[k] - usage_before[k], 6) for k in usage_after}
    record = {
        "passed": passed,
        "error_rate": round(result.error_rate, 4),
        "errors": result.errors,
        "error_summaries": summaries,
        "metrics": result.metrics,
        "prompt_hashes": {k: _hash(v) for k, v in result.prompts.items()},
        "prompts": result.prompts,
        "raw_responses": result.responses,
        "artifact": result.artifact,
        "usage": usage,
        "elapsed_s": round(time.perf_counter() - started, 3),
    }
    store.record_attempt(key, stage, ctx.attempt, record)
    history = [*ctx.previous, {**record, "attempt": ctx.attempt}]

    if passed:
        meta = spec.commit(ctx, result.artifact)
        return StageOutcome(stage, key, ctx.attempt, result.error_rate, False, {**result.metrics, **meta}, history)
    if ctx.attempt < ctx.max_attempts:
        joined = "\n\n".join(f"[{k}] {v}" for k, v in summaries.items()) or "(no error text)"
        log_fn(f"{stage} attempt {ctx.attempt} failed (error rate {result.error_rate:.0%}); retrying with the summary")
        raise AttemptFailed(stage, key, ctx.attempt, result.error_rate, joined)
    usable = [r for r in history if r.get("artifact") is not None and r["error_rate"] < 1.0]
    if not usable:
        raise StageExhausted(f"all {ctx.attempt} attempts failed completely, none is worth keeping; "
                             f"last errors: {json.dumps(result.errors)[:2000]}")
    best = min(usable, key=lambda r: (r["error_rate"], -r["attempt"]))
    log_fn(f"{stage}: no attempt met the {spec.threshold:.0%} threshold; keeping attempt {best['attempt']} "
           f"(error rate {best['error_rate']:.0%}) as degraded")
    meta = spec.commit(ctx, best["artifact"])
    return StageOutcome(stage, key, ctx.attempt, best["error_rate"], True, {**best["metrics"], **meta}, history)
