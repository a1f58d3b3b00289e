"""Synthesis statistics in the paper's terms (its Table 1): per stage, how often it succeeded, how many
attempts it took, what it cost; per batch, the cost per 100 environments.

Read from what the stages store: each scenario's stage status (attempts, degraded, valid) and attempt
records (token usage and cost of every LLM call, error summaries included), and each batch's
generation record. Imported stages have no attempts and count apart (`imported`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore

USAGE_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd")


def _usage(records: list[dict[str, Any]]) -> dict[str, float]:
    out = dict.fromkeys(USAGE_KEYS, 0.0)
    for record in records:
        for k in USAGE_KEYS:
            out[k] += float((record.get("usage") or {}).get(k, 0) or 0)
    return out


def stage_outcome(status: dict[str, Any] | None, attempts: list[dict[str, Any]]) -> str:
    """A stage's newest outcome: failed / invalid / degraded / ok / not_run. A failed attempt recorded after
    the last stored status wins over it (the stage gave up since)."""
    last = attempts[-1] if attempts else None
    if last is not None and not last.get("passed") and (not status or last.get("recorded_at", 0) > status.get("written_at", 0)):
        return "failed"
    if not status:
        return "not_run"
    if status.get("degraded"):
        return "degraded"
    return "ok" if status.get("valid", True) else "invalid"


# What the rows read of an attempt record (its errors and raw answers stay in the store).
ATTEMPT_FIELDS = ("passed", "recorded_at", "usage")


def _stage_records(store: ArtifactStore, key: str) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """A scenario's stored status and attempt records (`ATTEMPT_FIELDS`) per stage (read once per refresh:
    they feed both its batch's rows and the overall rows)."""
    return {stage: (store.stage_status(key, stage) or {},
                    [{k: a[k] for k in ATTEMPT_FIELDS if k in a} for a in store.list_attempts(key, stage)])
            for stage in PIPELINE_STAGES}


def stage_rows(store: ArtifactStore, scenarios: list[str],
               records: dict[str, dict[str, tuple[dict, list]]] | None = None) -> list[dict[str, Any]]:
    """One row per stage over `scenarios`: synthesized / succeeded / degraded / failed, attempts, tokens, cost.
    `records` (scenario -> `_stage_records`) saves reading them again."""
    records = records if records is not None else {}
    for key in scenarios:
        if key not in records:
            records[key] = _stage_records(store, key)
    rows = []
    for stage in PIPELINE_STAGES:
        row: dict[str, Any] = {"stage": stage, "scenarios": 0, "imported": 0, "succeeded": 0, "degraded": 0,
                               "failed": 0, "attempts": 0, **dict.fromkeys(USAGE_KEYS, 0.0)}
        for key in scenarios:
            status, attempts = records[key][stage]
            if status.get("source") == "imported" and not attempts:
                row["imported"] += 1
                continue
            if not status and not attempts:
                continue  # not reached (an earlier stage failed) or not run yet
            row["scenarios"] += 1
            outcome = stage_outcome(status, attempts)
            row[{"degraded": "degraded", "ok": "succeeded"}.get(outcome, "failed")] += 1
            row["attempts"] += status.get("attempts") or len(attempts) or 1
            for k, v in _usage(attempts).items():
                row[k] += v
        n = row["scenarios"]
        row["success_rate"] = round(row["succeeded"] / n, 4) if n else None
        row["mean_attempts"] = round(row["attempts"] / n, 3) if n else None
        row["cost_usd"] = round(row["cost_usd"], 6)
        rows.append(row)
    return rows


def batch_generation_usage(store: ArtifactStore, batch: str) -> dict[str, Any]:
    path = store.root / "batches" / f"{batch}.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {**(data.get("counts") or {}), **(data.get("usage") or {})}


def scenario_record(store: ArtifactStore, key: str) -> dict[str, Any]:
    """What the statistics read of one scenario: its batch, whether every stage is present, its stage records."""
    scenario = store.scenario(key)
    source = scenario.source if "source" in scenario.model_fields_set else None  # no source: "unknown" here
    return {"batch": scenario.seed_batch or source or "unknown",
            "complete": set(STAGES) <= set(store.present_stages(key)), "stages": _stage_records(store, key)}


def synthesis_statistics(store: ArtifactStore, scenarios: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per seed batch (and `imported`) and overall: stage rows, environments ready, cost per 100 ready ones.
    `scenarios`: every scenario's `scenario_record`, read now unless given (the catalog's index keeps them)."""
    if scenarios is None:
        scenarios = {key: scenario_record(store, key) for key in store.list_scenarios()}
    by_batch: dict[str, list[str]] = defaultdict(list)
    for key, record in scenarios.items():
        by_batch[record["batch"]].append(key)
    records = {key: record["stages"] for key, record in scenarios.items()}

    def summary(name: str, keys: list[str]) -> dict[str, Any]:
        rows = stage_rows(store, keys, records)
        generation = batch_generation_usage(store, name)
        cost = sum(r["cost_usd"] for r in rows) + float(generation.get("cost_usd", 0) or 0)
        ready = sum(1 for k in keys if scenarios[k]["complete"])
        return {"batch": name, "scenarios": len(keys), "ready": ready, "stages": rows, "generation": generation,
                "cost_usd": round(cost, 6),
                "cost_per_100_environments_usd": round(100 * cost / ready, 4) if ready else None,
                "tokens": int(sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
                              + generation.get("prompt_tokens", 0) + generation.get("completion_tokens", 0))}

    batches = [summary(name, sorted(keys)) for name, keys in sorted(by_batch.items())]
    overall = summary("all", sorted(scenarios))
    overall["cost_usd"] = round(sum(b["cost_usd"] for b in batches), 6)
    overall["cost_per_100_environments_usd"] = (round(100 * overall["cost_usd"] / overall["ready"], 4)
                                                if overall["ready"] else None)
    return {"batches": batches, "overall": overall}
