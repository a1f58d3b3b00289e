"""`awm synth`: the same assets as the UI, run without it, against the shared Dagster instance.

Scenario generation runs first; then each new scenario's six stages run in their own process (the
stage LLM calls of different scenarios overlap, capped by the `llm_api` pool of the instance); last the
catalog is refreshed. Runs and materializations land in the instance, so the UI shows them afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import dagster as dg

from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore

from awm_assets.instance import get_instance
from awm_assets.partitions import seed_batch_partitions
from awm_assets.synthesis.seeds import read_seed_batch
from awm_assets.synthesis.statistics import stage_outcome


# Step-level DEBUG events stay in the instance (the UI shows them); the terminal gets warnings and errors.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _run_generation(instance: dg.DagsterInstance, path: Path) -> tuple[bool, str, list[str]]:
    from awm_assets.sensors import batch_run_config

    from awm_assets.partitions import scenario_partitions

    batch = read_seed_batch(path)
    if not instance.has_dynamic_partition(seed_batch_partitions.name, batch.key):
        instance.add_dynamic_partitions(seed_batch_partitions.name, [batch.key])
    before = set(instance.get_dynamic_partitions(scenario_partitions.name))
    result = named_job("generate_scenarios").execute_in_process(
        instance=instance, partition_key=batch.key, run_config={**batch_run_config(batch.path), **QUIET_LOGS},
        raise_on_error=False, tags={"awm/seed_batch": batch.key})
    new = [k for k in instance.get_dynamic_partitions(scenario_partitions.name) if k not in before]
    return result.success, result.run_id, new


def named_job(name: str) -> dg.JobDefinition:
    """A job of the code location, resources bound: runs appear under its name in the UI, as if launched there."""
    from awm_assets.definitions import defs

    return defs.get_job_def(name)


def refresh_catalog(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """The `refresh_catalog` job: the quality gate where something changed, then the catalog."""
    return named_job("refresh_catalog").execute_in_process(instance=instance, run_config=QUIET_LOGS, raise_on_error=False)


def synthesize_partition(key: str) -> dict[str, Any]:
    """Materialize the six stages of one scenario (in a worker process)."""
    instance = get_instance()
    result = named_job("synthesize_scenario").execute_in_process(
        instance=instance, partition_key=key, run_config=QUIET_LOGS, raise_on_error=False, tags={"awm/scenario": key})
    failures = [ev.step_key + ": " + (ev.event_specific_data.error.message.strip() if ev.event_specific_data and ev.event_specific_data.error else "failed")
                for ev in result.all_events if ev.is_step_failure]
    return {"scenario": key, "run_id": result.run_id, "success": result.success, "failures": failures}


def scenario_report(store: ArtifactStore, key: str) -> dict[str, Any]:
    """Per stage: the newest outcome, a failed attempt after the last stored status winning over it."""
    stages = {}
    for stage in PIPELINE_STAGES:
        status = store.stage_status(key, stage)
        attempts = store.list_attempts(key, stage)
        outcome = stage_outcome(status, attempts)
        if outcome == "failed":
            last = attempts[-1]
            stages[stage] = {"status": "failed", "attempts": len(attempts), "error_rate": last.get("error_rate"),
                             "error": "; ".join(e for errs in (last.get("errors") or {}).values() for e in errs)[:500]}
        elif outcome == "not_run":
            stages[stage] = {"status": "not_run", "attempts": 0, "error_rate": None}
        else:
            stages[stage] = {"status": outcome, "attempts": status.get("attempts", len(attempts) or 1),
                             "error_rate": status.get("error_rate", 0.0)}
    ready = set(STAGES) <= set(store.present_stages(key)) and all(s["status"] in ("ok", "degraded") for s in stages.values())
    return {"scenario": key, "ready": ready, "stages": stages}


def synthesize_batch(seed_file: Path, *, workers: int = 2, resynthesize: bool = False,
                     progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """Generate scenarios for the batch, then synthesize its new (or, if asked, all its) scenarios."""
    instance = get_instance()
    store = ArtifactStore()
    batch = read_seed_batch(seed_file)
    ok, gen_run, new = _run_generation(instance, seed_file)
    out: dict[str, Any] = {"seed_batch": batch.key, "generation_run": gen_run, "generation_ok": ok,
                           "new_scenarios": new, "scenarios": []}
    if not ok:
        out["error"] = "scenario generation failed; see the run in the Dagster UI or `dagster run` logs"
        return out
    batch_keys = [k for k in store.list_scenarios() if store.read_json(k, "scenario.json").get("seed_batch") == batch.key]
    todo = batch_keys if resynthesize else [k for k in batch_keys if not set(STAGES) <= set(store.present_stages(k))]
    runs: dict[str, dict] = {}
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(synthesize_partition, key) for key in todo]
            if progress is not None:
                progress("scenario generation", steps=0, total=len(todo))
            for future in as_completed(futures):
                res = future.result()
                runs[res["scenario"]] = res
                if progress is not None:
                    progress(f"{res['scenario']} {'done' if res['success'] else 'FAILED'}")
    refresh_catalog(instance)
    for key in batch_keys:
        rep = scenario_report(store, key)
        if key in runs:
            rep["run_id"] = runs[key]["run_id"]
            rep["failures"] = runs[key]["failures"]
        out["scenarios"].append(rep)
    return out
