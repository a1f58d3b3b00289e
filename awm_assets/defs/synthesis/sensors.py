"""Synthesis sensors: register new seed batches and generate their scenarios, synthesize new scenarios."""

import json
from pathlib import Path

import dagster as dg

from awm_assets.defs.shared.partitions import scenario_partitions, seed_batch_partitions
from awm_assets.defs.shared.resources import StoreResource, sensor_interval_s
from awm_assets.defs.synthesis.jobs import generate_scenarios_job, synthesize_scenario_job
from awm_assets.synthesis.scenarios import batch_already_generated
from awm_assets.synthesis.seeds import DEFAULT_SEED_DIR, SeedFileError, find_seed_files, read_seed_batch
from awm_resources.settings import load_settings
from awm_resources.store import STAGES

SENSOR_INTERVAL_S = sensor_interval_s()


def seed_dir() -> Path:
    return load_settings().paths.seed_dir or DEFAULT_SEED_DIR


def batch_run_config(path: Path) -> dict:
    return {"ops": {"scenario_generation": {"config": {"path": str(path)}}}}


@dg.sensor(job=generate_scenarios_job, minimum_interval_seconds=SENSOR_INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Watches the seed folder ($AWM_SEED_DIR, default seeds/) and launches scenario generation "
                       "for each new or changed seed batch: a .jsonl file of {\"name\", \"description\"?} lines or a "
                       ".txt file of one name per line; the file name is the batch name. The offline replay model "
                       "answers only the demo batch; others need a real model (AWM_LLM_MODEL).")
def seed_batch_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult | dg.SkipReason:
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    st = store.get_store()
    new_keys, requests = [], []
    for path in find_seed_files(seed_dir()):
        try:
            batch = read_seed_batch(path)
        except SeedFileError as exc:
            if seen.get(str(path)) != "invalid":
                context.log.error(str(exc))
            seen[str(path)] = "invalid"
            continue
        if seen.get(str(path)) == batch.digest or batch_already_generated(st, batch):
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
def new_scenario_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult | dg.SkipReason:
    st = store.get_store()
    requested: set[str] = set(json.loads(context.cursor)) if context.cursor else set()
    requests = []
    for key in context.instance.get_dynamic_partitions(scenario_partitions.name):
        if key in requested:
            continue
        requested.add(key)
        if st.has(key, "scenario.json") and set(STAGES) <= set(st.present_stages(key)):
            continue  # already complete (imported or synthesized earlier)
        requests.append(dg.RunRequest(run_key=f"synthesize-{key}", partition_key=key))
    if not requests:
        return dg.SkipReason("no new scenario partitions")
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(sorted(requested)))
