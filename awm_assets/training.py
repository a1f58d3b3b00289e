"""`grpo_training` asset: GRPO on the environment catalog, launched on Ray (thin; see awm_rl.training).

It depends on `environment_catalog` (its lineage), reads the trainer config from a YAML file named
in the run config (plus optional YAML overrides and a catalog filter), launches the job on the Ray
cluster of the `ray` resource, streams progress to the run log, and records the checkpoint, the
final metrics, the catalog version it trained on and the reward / completion curves. A weekly
schedule exists but is off by default. No `from __future__ import annotations` here: Dagster
resolves the config and resource annotations at definition time.
"""

import base64
from pathlib import Path

import dagster as dg
import yaml
from pydantic import Field

from awm_assets.resources import RayResource, StoreResource
from awm_resources.store import PROJECT_ROOT

DEFAULT_CONFIG = "configs/tiny-cpu.yaml"


class TrainingRunConfig(dg.Config):
    config_path: str = Field(default=DEFAULT_CONFIG, description="trainer YAML (relative to the project root or absolute)")
    overrides_yaml: str = Field(default="", description="YAML merged on top of the file, e.g. 'grpo: {learning_rate: 1e-6}'")
    scenarios: list[str] = Field(default_factory=list, description="train only on these catalog environments (empty: the config's)")
    steps: int = Field(default=0, description="override grpo.steps (0: the config's)")


def _load(config: TrainingRunConfig, store_root: Path, run_id: str):
    from awm_rl.training import ConfigError, load_config

    path = Path(config.config_path)
    path = path if path.is_absolute() else PROJECT_ROOT / path
    try:
        overrides = yaml.safe_load(config.overrides_yaml) if config.overrides_yaml.strip() else {}
    except yaml.YAMLError as exc:
        raise dg.Failure(description=f"overrides_yaml is not valid YAML: {exc}", allow_retries=False) from None
    if not isinstance(overrides, dict):
        raise dg.Failure(description="overrides_yaml must be a YAML mapping", allow_retries=False)
    overrides.setdefault("environments", {})["store_root"] = str(store_root)
    if config.scenarios:
        overrides["environments"]["scenarios"] = list(config.scenarios)
    if config.steps:
        overrides.setdefault("grpo", {})["steps"] = config.steps
    try:
        cfg = load_config(path, overrides)
    except ConfigError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    if not cfg.output_dir:
        cfg = cfg.model_copy(update={"output_dir": str(store_root / "training" / cfg.name / run_id[:8])})
    return cfg


@dg.asset(
    deps=["environment_catalog"],
    group_name="training",
    kinds={"python", "ray"},
    description="GRPO training of a tool-use policy on the ready environments (history-aware, Ray rollouts): "
                "checkpoint, per-step metrics and reward / completion curves.",
)
def grpo_training(context: dg.AssetExecutionContext, config: TrainingRunConfig, store: StoreResource,
                  ray: RayResource) -> dg.MaterializeResult:
    from awm_rl.training import TrainingError, launch_training

    st = store.get_store()
    cfg = _load(config, st.root, context.run.run_id)
    if ray.address and not cfg.ray.address:
        cfg = cfg.model_copy(update={"ray": cfg.ray.model_copy(update={"address": ray.address})})
    ray.connect()
    catalog_event = context.instance.get_latest_materialization_event(dg.AssetKey("environment_catalog"))
    context.log.info(f"training config {config.config_path} -> {cfg.resolved_output_dir()}")
    try:
        summary = launch_training(cfg, on_event=lambda event: context.log.info(str(event.get("message", event))))
    except TrainingError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    last = summary.get("final_metrics") or {}
    curves = summary.get("curves")
    image = base64.b64encode(Path(curves).read_bytes()).decode() if curves else ""
    rows = ["| step | reward | completed | format errors | env errors | turns | loss | step s |", "|---|---|---|---|---|---|---|---|"]
    from awm_rl.training.metrics import read_metrics

    for r in read_metrics(Path(summary["output_dir"])):
        rows.append(f"| {r['step']} | {r['reward_mean']:+.3f} | {r['completion_rate']:.0%} | {r['format_error_ratio']:.0%} | "
                    f"{r['environment_error_ratio']:.0%} | {r['turns_mean']:.1f} | {r.get('loss', 0):.4g} | {r['step_s']:.1f} |")
    catalog = summary["catalog"]
    return dg.MaterializeResult(
        metadata={
            "checkpoint": dg.MetadataValue.path(summary.get("last_checkpoint") or summary["final_model"]),
            "final_model": dg.MetadataValue.path(summary["final_model"]),
            "output_dir": dg.MetadataValue.path(summary["output_dir"]),
            "steps": summary["steps"],
            "reward_mean": float(last.get("reward_mean", 0.0)),
            "completion_rate": float(last.get("completion_rate", 0.0)),
            "format_error_ratio": float(last.get("format_error_ratio", 0.0)),
            "environment_error_ratio": float(last.get("environment_error_ratio", 0.0)),
            "final_metrics": dg.MetadataValue.json(last),
            "per_step": dg.MetadataValue.md("\n".join(rows)),
            "curves": dg.MetadataValue.md(f"![reward and completion curves](data:image/png;base64,{image})"),
            "catalog_sha256": catalog["sha256"],
            "catalog_run_id": catalog_event.run_id if catalog_event else "none",
            "environments": dg.MetadataValue.json(summary["scenarios"]),
            "tasks": summary["tasks"],
            "generation": summary["generation"],
            "weights_delta_l2": float(summary["weights"]["param_delta_l2"]),
            "wall_s": float(summary["wall_s"]),
            "trainer_config": dg.MetadataValue.json(summary["config"]),
        },
        data_version=dg.DataVersion(f"{catalog['sha256'][:16]}-{context.run.run_id[:8]}"),
    )


training_job = dg.define_asset_job("training_job", selection=[grpo_training],
                                   description="GRPO training on the current environment catalog.")


def training_run_config(config_path: str = DEFAULT_CONFIG, steps: int = 0, scenarios: list[str] | None = None,
                        overrides_yaml: str = "") -> dict:
    """Run config for `training_job` / `grpo_training`."""
    return {"ops": {"grpo_training": {"config": {"config_path": config_path, "steps": steps,
                                                 "scenarios": list(scenarios or []), "overrides_yaml": overrides_yaml}}}}


training_schedule = dg.ScheduleDefinition(
    name="periodic_training", job=training_job, cron_schedule="0 3 * * 1",
    run_config=training_run_config(), default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly GRPO run on the current catalog (off by default; point config_path at a GPU config).",
)
