"""Sensors: register new seed batches, synthesize new scenarios, fail runs whose worker died with the daemon;
the catalog refreshes itself declaratively."""


import json
import os
import socket
from pathlib import Path

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason

from awm_resources.store import STAGES, ArtifactStore, process_alive

from awm_assets.jobs import generate_scenarios_job, synthesize_scenario_job
from awm_assets.resources import env_number
from awm_assets.partitions import scenario_partitions, seed_batch_partitions
from awm_assets.synthesis.scenarios import batch_already_generated
from awm_assets.synthesis.seeds import DEFAULT_SEED_DIR, SeedFileError, find_seed_files, read_seed_batch


# How often the seed and scenario sensors look (seconds; AWM_SENSOR_INTERVAL_S); the watchdog and the catalog
# automation look twice as often.
SENSOR_INTERVAL_S = max(1, env_number("AWM_SENSOR_INTERVAL_S", 30, int))


def seed_dir() -> Path:
    return Path(os.environ.get("AWM_SEED_DIR") or DEFAULT_SEED_DIR)


def batch_run_config(path: Path) -> dict:
    return {"ops": {"scenario_generation": {"config": {"path": str(path)}}}}


@dg.sensor(job=generate_scenarios_job, minimum_interval_seconds=SENSOR_INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Watches the seed folder ($AWM_SEED_DIR, default seeds/) and launches scenario generation "
                       "for each new or changed seed batch: a .jsonl file of {\"name\", \"description\"?} lines or a "
                       ".txt file of one name per line; the file name is the batch name. The offline replay model "
                       "answers only the demo batch; others need a real model (AWM_LLM_MODEL).")
def seed_batch_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    store = ArtifactStore()
    new_keys, requests = [], []
    for path in find_seed_files(seed_dir()):
        try:
            batch = read_seed_batch(path)
        except SeedFileError as exc:
            if seen.get(str(path)) != "invalid":
                context.log.error(str(exc))
            seen[str(path)] = "invalid"
            continue
        if seen.get(str(path)) == batch.digest or batch_already_generated(store, batch):
            seen[str(path)] = batch.digest
            continue
        seen[str(path)] = batch.digest
        if not context.instance.has_dynamic_partition(seed_batch_partitions.name, batch.key):
            new_keys.append(batch.key)
        requests.append(dg.RunRequest(run_key=f"{batch.key}-{batch.digest}", partition_key=batch.key,
                                      run_config=batch_run_config(batch.path)))
    if not requests:
        return dg.SkipReason("no new or changed seed batch")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen),
                           dynamic_partitions_requests=[seed_batch_partitions.build_add_request(new_keys)] if new_keys else [])


@dg.sensor(job=synthesize_scenario_job, minimum_interval_seconds=SENSOR_INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Launches the six synthesis stages for every scenario partition not yet synthesized "
                       "(a new seed batch thus backfills only its new scenarios).")
def new_scenario_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    store = ArtifactStore()
    requested: set[str] = set(json.loads(context.cursor)) if context.cursor else set()
    requests = []
    for key in context.instance.get_dynamic_partitions(scenario_partitions.name):
        if key in requested:
            continue
        requested.add(key)
        if store.has(key, "scenario.json") and set(STAGES) <= set(store.present_stages(key)):
            continue  # already complete (imported or synthesized earlier)
        requests.append(dg.RunRequest(run_key=f"synthesize-{key}", partition_key=key))
    if not requests:
        return dg.SkipReason("no new scenario partitions")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(sorted(requested)))


# Set on a run by Dagster's DefaultRunLauncher: the code server it was started in ({"host", "socket" | "port"}).
GRPC_INFO_TAG = ".dagster/grpc_info"


def _code_server_gone(info: dict) -> bool:
    """True when the code server a run was launched in no longer listens on this host; False when it still
    does or when it is elsewhere (nothing to judge from here)."""
    try:
        if info.get("socket"):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2)
                sock.connect(info["socket"])
        elif info.get("port") and info.get("host") in ("localhost", "127.0.0.1", "::1"):
            socket.create_connection((info["host"], int(info["port"])), timeout=2).close()
        else:
            return False
    except OSError:
        return True
    return False


def _run_worker(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid of the run's worker process and when it said so ("Started process for run (pid: N)")."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=20).records
    for record in records:
        data = record.event_log_entry.dagster_event.engine_event_data if record.event_log_entry.dagster_event else None
        pid = data.metadata.get("pid") if data else None
        if pid is not None and str(pid.value).isdigit():
            return int(pid.value), record.timestamp
    return None


@dg.sensor(minimum_interval_seconds=max(1, SENSOR_INTERVAL_S // 2), default_status=dg.DefaultSensorStatus.RUNNING,
           description="Marks failed, with the reason, a starting or started run whose code server and worker "
                       "process are both gone (e.g. the daemon was killed with its process group): Dagster's run "
                       "monitoring cannot check the health of runs launched by the default run launcher, so such a "
                       "run would stay in progress forever and block the catalog refresh. run_retries "
                       "(dagster.yaml) then re-executes it from its failed steps.")
def run_worker_watchdog(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    instance = context.instance
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING,
                                                                     dg.DagsterRunStatus.STARTED])):
        run = record.dagster_run
        info = json.loads(run.tags.get(GRPC_INFO_TAG) or "{}")
        if not info or not _code_server_gone(info):
            # A live code server notices its own workers dying; a run not yet launched is left to start_timeout.
            continue
        worker = _run_worker(instance, run.run_id)
        if worker is not None and process_alive(*worker):
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status != run.status:
            continue
        where = info.get("socket") or f"{info.get('host')}:{info.get('port')}"
        process = (f"its worker process (pid {worker[0]}) exited without reporting an outcome" if worker
                   else "its worker process never reported starting")
        retry = ("run_retries re-executes it from its failed steps" if instance.run_retries_enabled
                 else "re-execute it from its failed steps")
        message = (f"Run worker lost: run {run.run_id} was {run.status.value}, but the code server that launched it "
                   f"({where}) is gone and {process} (the Dagster daemon was killed with its process group, or the "
                   f"machine restarted). Marked failed by run_worker_watchdog; {retry}.")
        instance.report_run_failed(run, message, JobFailureData(
            error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
        context.log.warning(message)
        failed.append(run.run_id)
    return dg.SkipReason(f"marked {len(failed)} lost run(s) failed: {', '.join(failed)}" if failed
                         else "no run lost its worker")


# Declarative automation instead of a run-status sensor per synthesized scenario: the quality summary,
# the catalog and the statistics carry `catalog_refresh_condition()` (awm_assets/quality_assets.py says
# when it fires and why it is not `eager()`); this sensor evaluates it. Declared explicitly and RUNNING by
# default, so `dagster dev` refreshes the catalog with no toggle in the UI (the implicit default
# automation sensor starts stopped).
catalog_automation = dg.AutomationConditionSensorDefinition(
    "catalog_automation",
    target=dg.AssetSelection.assets("environment_quality", "environment_catalog", "synthesis_statistics"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=max(1, SENSOR_INTERVAL_S // 2),
    description="Refreshes environment_quality, environment_catalog and synthesis_statistics once scenario "
                "runs have settled after any stage materialized (incremental: unchanged scenarios are not "
                "re-audited).",
)
