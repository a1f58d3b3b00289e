"""In-process runs of the code location's jobs, the same jobs as the UI recorded in the same Dagster instance:
`awm synth` (scenario generation, then each new scenario's six stages in their own process, the stage LLM
calls of different scenarios overlapping up to the `llm_api` pool of the instance, then the catalog),
`awm catalog --refresh` and `awm repair`. Every job is the code location's own, resources bound, so runs
show under its name in the UI as if launched there; the only module besides the workspace that imports
`awm_assets.definitions`.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import dagster as dg

from awm_assets.definitions import defs
from awm_assets.defs.shared.partitions import scenario_partitions, seed_batch_partitions
from awm_assets.defs.synthesis.sensors import batch_run_config
from awm_assets.instance import get_instance, register_scenarios
from awm_assets.synthesis.seeds import read_seed_batch
from awm_assets.synthesis.statistics import stage_outcome
from awm_resources.store import PIPELINE_STAGES, STAGES, ArtifactStore

# Step-level DEBUG events stay in the instance (the UI shows them); the terminal gets warnings and errors.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def named_job(name: str) -> dg.JobDefinition:
    """A job of the code location with the location's resources bound."""
    return defs.resolve_job_def(name)


def bound_store() -> ArtifactStore:
    """The artifact store of the code location's `store` resource (its `root`, else $AWM_HOME), as runs see it.
    The root is read as configured (an `EnvVar` resolved here): initializing the resource would build a
    throwaway Dagster instance."""
    root = defs.resources["store"].root
    return ArtifactStore((root.get_value() if isinstance(root, dg.EnvVar) else root) or None)


def _run_generation(instance: dg.DagsterInstance, path: Path) -> tuple[bool, str, list[str]]:
    batch = read_seed_batch(path)
    if not instance.has_dynamic_partition(seed_batch_partitions.name, batch.key):
        instance.add_dynamic_partitions(seed_batch_partitions.name, [batch.key])
    before = set(instance.get_dynamic_partitions(scenario_partitions.name))
    result = named_job("generate_scenarios").execute_in_process(
        instance=instance, partition_key=batch.key, run_config={**batch_run_config(batch.path), **QUIET_LOGS},
        raise_on_error=False, tags={"awm/seed_batch": batch.key})
    new = [k for k in instance.get_dynamic_partitions(scenario_partitions.name) if k not in before]
    return result.success, result.run_id, new


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
    store = bound_store()
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
    return _batch_report(store, batch_keys, runs, out)


def _batch_report(store: ArtifactStore, batch_keys: list[str], runs: dict[str, dict], out: dict[str, Any]) -> dict[str, Any]:
    for key in batch_keys:
        rep = scenario_report(store, key)
        if key in runs:
            rep.update({k: v for k, v in runs[key].items() if k not in ("scenario", "success")})
        out["scenarios"].append(rep)
    return out


def synthesize_batch_on_cluster(seed_file: Path, *, resynthesize: bool = False, timeout_s: float = 6 * 3600,
                                progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """`awm synth --cluster`: the runs of synthesize_batch, each launched whole onto Ray by the instance's run
    launcher (AwmRayRunLauncher, dagster.cluster.yaml) and waited on: scenario generation, then the batch's
    scenarios all at once (Ray places them on the nodes with the launcher's resources), then the catalog. A run
    lost with its node is followed to its retry (run_retries, by the daemon)."""
    from awm_assets import cluster_runs
    from awm_assets.defs.shared.run_launcher import RAY_NODE_TAG

    instance = get_instance()
    cluster_runs.check_launcher(instance)
    store = bound_store()
    batch = read_seed_batch(seed_file)
    if not instance.has_dynamic_partition(seed_batch_partitions.name, batch.key):
        instance.add_dynamic_partitions(seed_batch_partitions.name, [batch.key])
    before = set(instance.get_dynamic_partitions(scenario_partitions.name))
    success = dg.DagsterRunStatus.SUCCESS

    def wait(run_ids: list[str], on_done: Callable[[str, dg.DagsterRun], None] | None = None) -> dict[str, dg.DagsterRun]:
        return cluster_runs.wait_for_runs(instance, run_ids, timeout_s=timeout_s, on_done=on_done)

    with cluster_runs.code_location(instance) as context:
        # The seed file's absolute path: the run reads it on whichever node it lands (a shared filesystem).
        gen_id = cluster_runs.launch(context, "generate_scenarios", partition=batch.key,
                                     run_config=batch_run_config(batch.path.resolve()), tags={"awm/seed_batch": batch.key})
        gen = wait([gen_id])[gen_id]
        new = [k for k in instance.get_dynamic_partitions(scenario_partitions.name) if k not in before]
        out: dict[str, Any] = {"seed_batch": batch.key, "generation_run": gen.run_id, "generation_ok": gen.status == success,
                               "generation_node": gen.tags.get(RAY_NODE_TAG) or None, "new_scenarios": new, "scenarios": []}
        if gen.status != success:
            out["error"] = ("scenario generation failed: " + "; ".join(cluster_runs.run_failures(instance, gen))[:1000]
                            + "; see the run in the Dagster UI")
            return out
        batch_keys = [k for k in store.list_scenarios() if store.read_json(k, "scenario.json").get("seed_batch") == batch.key]
        todo = batch_keys if resynthesize else [k for k in batch_keys if not set(STAGES) <= set(store.present_stages(k))]
        launched = {cluster_runs.launch(context, "synthesize_scenario", partition=key, tags={"awm/scenario": key}): key
                    for key in todo}
        if progress is not None and todo:
            progress("scenario generation", steps=0, total=len(todo))

        def done(first: str, run: dg.DagsterRun) -> None:
            if progress is not None:
                progress(f"{launched[first]} {'done' if run.status == success else 'FAILED'}")

        runs = {}
        for first, run in wait(list(launched), done).items():
            runs[launched[first]] = {"scenario": launched[first], "run_id": run.run_id, "success": run.status == success,
                                     "failures": [] if run.status == success else cluster_runs.run_failures(instance, run),
                                     "ray_node": run.tags.get(RAY_NODE_TAG) or None,
                                     "retried_from": first if run.run_id != first else None}
        cat_id = cluster_runs.launch(context, "refresh_catalog")
        cat = wait([cat_id])[cat_id]
        out["catalog_run"] = {"run_id": cat.run_id, "success": cat.status == success}
    return _batch_report(store, batch_keys, runs, out)


def repair_scenarios(scenarios: list[str], config: dict[str, Any], instance: dg.DagsterInstance,
                    progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """`awm repair`: one in-process run of `repair_environment` per scenario, recorded in `instance`."""
    register_scenarios(instance, scenarios)
    job = named_job("repair_environment")
    reports = []
    for key in scenarios:
        result = job.execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False,
            run_config={**QUIET_LOGS, "ops": {"repair_scenario_op": {"config": config}}}, tags={"awm/scenario": key})
        if progress is not None:
            progress(f"{key} {'done' if result.success else 'FAILED'}")
        if result.success:
            reports.append({**result.output_for_node("repair_scenario_op"), "run_id": result.run_id})
            continue
        failure = next((ev.event_specific_data.error.message.strip() for ev in result.all_events
                        if ev.is_step_failure and ev.event_specific_data and ev.event_specific_data.error), "failed")
        reports.append({"scenario": key, "run_id": result.run_id, "error": failure.split("Failure: ", 1)[-1], "phases": {}})
    return reports


def ready_environments(store: ArtifactStore) -> list[str]:
    """The ready environments of `catalog.json` (empty before the first catalog refresh)."""
    catalog = store.catalog()
    return sorted(e.name for e in catalog.ready()) if catalog is not None else []


def evolve_run_config(*, policy: str, tasks_per_env: int, max_new_scenarios: int, candidates: int,
                      judge_mode: str = "code") -> dict[str, Any]:
    return {**QUIET_LOGS, "ops": {
        "evaluation": {"config": {"policy": policy, "tasks_per_env": tasks_per_env, "judge_mode": judge_mode}},
        "targeted_seed_batch": {"config": {"max_new_scenarios": max_new_scenarios, "candidates": candidates}}}}


def evolve(rounds: int = 1, *, policy: str, tasks_per_env: int = 3, max_new_scenarios: int = 1,
           candidates: int = 3, workers: int = 2, progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """`awm evolve`: per round the `evolve_round` job (evaluation -> weaknesses -> targeted seed batch), then the
    batch synthesized as `awm synth` does (generation, its new scenarios' six stages, the catalog refresh).
    `policy` has no default: the reference solutions complete every task and would leave nothing to aim at.
    A round that finds nothing to aim at, or whose synthesis fails, is the last."""
    from awm_rl.evaluation.weaknesses import latest_report

    instance = get_instance()
    store = bound_store()
    register_scenarios(instance, store.list_scenarios())  # a store synthesized or imported elsewhere
    if store.catalog() is None:
        refresh_catalog(instance)
    out: dict[str, Any] = {"rounds": []}
    for number in range(1, rounds + 1):
        before = ready_environments(store)
        result = named_job("evolve_round").execute_in_process(
            instance=instance, raise_on_error=False, tags={"awm/evolve_round": str(number)},
            run_config=evolve_run_config(policy=policy, tasks_per_env=tasks_per_env,
                                         max_new_scenarios=max_new_scenarios, candidates=candidates))
        entry: dict[str, Any] = {"round": number, "run_id": result.run_id, "weaknesses": [], "seed_batch": None,
                                 "new_scenarios": [], "catalog_before": len(before), "catalog_after": len(before)}
        out["rounds"].append(entry)
        if not result.success:
            entry["error"] = next((ev.event_specific_data.error.message.strip() for ev in result.all_events
                                   if ev.is_step_failure and ev.event_specific_data and ev.event_specific_data.error),
                                  "the evolve_round run failed").split("Failure: ", 1)[-1]
            break
        latest = latest_report(store)
        if latest is not None:
            report = latest[1]
            entry["evaluation"] = {"dir": report.evaluation, "policy": report.policy, "episodes": report.episodes,
                                   "failed": report.failed}
            entry["weaknesses"] = [{"dimension": w.dimension, "key": w.key, "failed": w.failed,
                                    "episodes": w.episodes, "fail_rate": w.fail_rate} for w in report.weaknesses]
        batch_meta = result.asset_materializations_for_node("targeted_seed_batch")[-1].metadata
        seed_batch = str(batch_meta["seed_batch"].value) if "seed_batch" in batch_meta else ""
        if progress is not None:
            progress(f"round {number}: weaknesses found, seed batch {seed_batch or 'none'}")
        if not seed_batch:
            entry["reason"] = str(batch_meta["reason"].value) if "reason" in batch_meta else "no seed batch written"
            break
        entry["seed_batch"] = seed_batch
        synth = synthesize_batch(Path(seed_batch), workers=workers, progress=progress)
        after = ready_environments(store)
        entry["new_scenarios"] = synth["new_scenarios"]
        entry["scenarios"] = [{"scenario": s["scenario"], "ready": s["ready"]} for s in synth["scenarios"]]
        entry["catalog_after"] = len(after)
        entry["added_to_catalog"] = sorted(set(after) - set(before))
        if not synth.get("generation_ok"):
            entry["error"] = synth.get("error", "scenario generation failed")
            break
    return out
