"""The Dagster side: `grpo_training` materializes with the tiny config after `environment_catalog`,
records checkpoint, metrics, curves and the catalog version; the schedule exists and is off."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest


@pytest.mark.slow
def test_training_asset_materializes_with_the_tiny_config(corpus_store, tmp_path):
    import dagster as dg

    from awm_assets.defs.catalog.catalog_asset import environment_catalog
    from awm_assets.defs.shared.resources import RayResource, StoreResource
    from awm_assets.defs.training.jobs import training_run_config
    from awm_assets.defs.training.training_asset import grpo_training
    from awm_resources.provenance import environment_digest
    from awm_resources.store import ArtifactStore

    root = tmp_path / "store"
    shutil.copytree(corpus_store.root, root)
    (root / "catalog.json").unlink(missing_ok=True)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [environment_catalog, grpo_training], instance=instance,
        resources={"store": StoreResource(root=str(root)), "ray": RayResource()},
        # A shorter warm start than the file's (tests/training/test_train_e2e.py runs the file as it is).
        run_config=training_run_config("configs/tiny-cpu.yaml", steps=1, bfcl_categories=["multi_turn_base"],
                                       bfcl_limit=1, overrides_yaml="warm_start: {steps: 20}"),
    )
    assert result.success
    meta = result.asset_materializations_for_node("grpo_training")[0].metadata
    assert meta["steps"].value == 1
    assert (root / "training" / "tiny-cpu").is_dir()
    checkpoint = meta["checkpoint"].value
    assert checkpoint.startswith(str(root / "training" / "tiny-cpu")) and Path(checkpoint).is_dir()
    assert meta["catalog_sha256"].value == hashlib.sha256((root / "catalog.json").read_bytes()).hexdigest()
    assert meta["catalog_run_id"].value == result.run_id  # the catalog materialized in this run
    # Provenance: the catalog version trained on, as Dagster's lineage records it, and each environment's version.
    digest = json.loads((root / "catalog.json").read_text())["digest"]
    mat = result.asset_materializations_for_node("grpo_training")[0]
    assert meta["catalog_digest"].value == digest == mat.tags["dagster/input_data_version/environment_catalog"]
    versions = {r.data["environment"]: r.data["version"] for r in meta["environment_versions"].value.records}
    assert versions == {k: environment_digest(ArtifactStore(root), k) for k in ("fortnite_item_shop", "gofundme")}
    # Plots are files, tables are tables, environments link to their pages.
    assert Path(meta["curves_plot"].value).read_bytes()[:4] == b"\x89PNG"
    assert [r.data["step"] for r in meta["per_step"].value.records] == [1]
    assert {r.data["metric"] for r in meta["final_metrics"].value.records} >= {"reward_mean", "completion_rate", "loss"}
    assert meta["environments"].value == ("[fortnite_item_shop](/assets/verifiers?partition=fortnite_item_shop), "
                                          "[gofundme](/assets/verifiers?partition=gofundme)")
    assert any(p.name.startswith("events.out.tfevents") for p in Path(meta["tensorboard"].value).rglob("*"))
    logs = [e.message for e in instance.all_logs(result.run_id) if e.user_message]
    assert any("warm start:" in m for m in logs) and any("step 1/1:" in m for m in logs)  # progress streamed
    # BFCL over training steps: the step-1 checkpoint scored by BFCL's own checker (the tiny model's score is
    # what it is), as a table and a plot file.
    [row] = [r.data for r in meta["bfcl_over_steps"].value.records]
    assert row["step"] == 1 and row["category"] == "multi_turn_base" and row["cases"] == 1 and 0 <= row["accuracy"] <= 1
    assert Path(meta["bfcl_over_steps_plot"].value).read_bytes()[:4] == b"\x89PNG"
    # Each RL step reached the UI while the run went on, as an observation of the asset.
    observations = [e.dagster_event.event_specific_data.asset_observation for e in instance.all_logs(result.run_id)
                    if e.dagster_event and e.dagster_event.event_type_value == "ASSET_OBSERVATION"]
    assert [o.metadata["step"].value for o in observations] == [1]
    assert "reward_mean" in observations[0].metadata


def test_schedule_is_off_and_runs_the_training_job():
    import dagster as dg

    from awm_assets.defs.training.jobs import training_job, training_schedule

    assert training_schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert training_schedule.job_name == training_job.name == "training_job"
    config = training_schedule.evaluate_tick(dg.build_schedule_context()).run_requests[0].run_config
    assert config["ops"]["grpo_training"]["config"]["config_path"] == "configs/tiny-cpu.yaml"


def test_bad_overrides_fail_without_retry(corpus_store, tmp_path):
    import dagster as dg

    from awm_assets.defs.shared.resources import RayResource, StoreResource
    from awm_assets.defs.training.jobs import training_run_config
    from awm_assets.defs.training.training_asset import grpo_training

    result = dg.materialize([grpo_training], resources={"store": StoreResource(root=str(tmp_path)), "ray": RayResource()},
                            run_config=training_run_config(overrides_yaml="grpo: {group_size: 1}"), raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "grpo.group_size" in failure.step_failure_data.error.message
