"""`grpo_training` asset: GRPO on the environment catalog, launched on Ray (thin; see awm_rl.training).

It depends on `environment_catalog` (its lineage), reads the trainer config from a YAML file named
in the run config (plus optional YAML overrides and a catalog filter), launches the job on the Ray
cluster of the `ray` resource, streams progress to the run log, and records the checkpoint, the
final metrics, the catalog version it trained on and the reward / completion curves. No `from __future__ import annotations` here: Dagster
resolves the config and resource annotations at definition time.
"""

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import yaml
from pydantic import Field

from awm_assets.defs.shared.resources import RayResource, StoreResource
from awm_assets.defs.shared.ui_tables import asset_link, key_value_table, records_table
from awm_resources.store import PROJECT_ROOT

if TYPE_CHECKING:
    from awm_rl.training.config import RolloutConfig

DEFAULT_CONFIG = "configs/tiny-cpu.yaml"
# The step metrics a researcher watches first: live as observations during the run, and in the final table.
HEADLINE = ("reward_mean", "reward_std", "completion_rate", "format_error_ratio", "environment_error_ratio",
            "policy_failure_ratio", "turns_mean", "loss", "kl", "entropy", "engine_ratio_mean", "engine_masked_frac",
            "rollout_s", "generation_s", "env_s", "step_s")


class TrainingRunConfig(dg.Config):
    config_path: str = Field(default=DEFAULT_CONFIG, description="trainer YAML (relative to the project root or absolute)")
    overrides_yaml: str = Field(default="", description="YAML merged on top of the file, e.g. 'grpo: {learning_rate: 1e-6}'")
    scenarios: list[str] = Field(default_factory=list, description="train only on these catalog environments (empty: "
                                 "the config's list, which tiny-cpu replaces by the catalog's ready ones where absent)")
    steps: int = Field(default=0, description="override grpo.steps (0: the config's)")
    catalog_version: str = Field(default="", description="train on this kept catalog version (a catalog_digest; "
                                 "empty: catalog.json as it is); fails, listing them, if its environments changed since")
    bfcl_categories: list[str] = Field(default_factory=list, description="evaluate every saved checkpoint on these BFCL "
                                       "categories (e.g. multi_turn_base): accuracy per category over training steps")
    bfcl_limit: int = Field(default=5, description="BFCL cases per category and checkpoint (0: all)")


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
        overrides["environments"]["if_not_ready"] = "error"  # named in the run: strict
    if config.steps:
        overrides.setdefault("grpo", {})["steps"] = config.steps
    if config.catalog_version:
        overrides["environments"].update({"catalog_version": config.catalog_version, "catalog": None})
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
                "checkpoint, per-step metrics and reward / completion curves; with a curriculum, what it did per step "
                "(tasks drawn per pass-rate band, groups dropped for equal rewards, refills, retired tasks).",
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

    def on_event(event: dict) -> None:
        context.log.info(str(event.get("message", event)))
        record = event.get("record") if event.get("kind") == "step" else None
        if record:  # live in the UI: one observation per RL step, plotted by the asset's metadata plots
            context.log_event(dg.AssetObservation(asset_key=context.asset_key, metadata=step_observation(record)))

    try:
        summary = launch_training(cfg, on_event=on_event)
    except TrainingError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    last = summary.get("final_metrics") or {}
    from awm_rl.training.metrics import read_metrics

    per_step = read_metrics(Path(summary["output_dir"]))
    bfcl = _bfcl_over_steps(context, config, per_step, Path(summary["output_dir"]), cfg.rollout)
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
            "final_metrics": key_value_table({k: v for k, v in last.items() if k != "checkpoint"}),
            "per_step": records_table(per_step, ["step", *(k for k in HEADLINE if any(k in r for r in per_step))]),
            "curves_plot": dg.MetadataValue.path(summary.get("curves") or ""),
            "tensorboard": dg.MetadataValue.path(summary.get("tensorboard") or ""),
            "catalog_sha256": catalog["sha256"],
            "catalog_run_id": catalog_event.run_id if catalog_event else "none",
            # The catalog version trained on (environment_catalog's data version) and each environment's version.
            "catalog_digest": summary["catalog_digest"],
            "environment_versions": records_table([{"environment": k, "version": v}
                                                   for k, v in summary["environments"].items()], ["environment", "version"]),
            "environments": dg.MetadataValue.md(", ".join(asset_link("verifiers", s) for s in summary["scenarios"])),
            "tasks": summary["tasks"],
            "generation": summary["generation"],
            "os_isolation": summary.get("os_isolation", "unknown"),
            "weights_delta_l2": float(summary["weights"]["param_delta_l2"]),
            "wall_s": float(summary["wall_s"]),
            **bfcl,
            **curriculum_metadata(summary.get("curriculum"), per_step),
            "trainer_config": dg.MetadataValue.md(f"```yaml\n{yaml.safe_dump(summary['config'], sort_keys=False)}```"),
        },
        data_version=dg.DataVersion(f"{summary['catalog_digest']}-{context.run.run_id[:8]}"),
    )


def step_observation(record: dict) -> dict:
    """A step's live observation: the headline metrics and, with a curriculum, its numbers (tasks drawn per
    pass-rate band, groups dropped for equal rewards, refills, retired tasks: `Curriculum.metrics`)."""
    numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"step": int(record["step"]), **{k: float(numbers[k]) for k in HEADLINE if k in numbers},
            **{k: v for k, v in numbers.items() if k.startswith("curriculum_")}}


def curriculum_metadata(curriculum: dict | None, per_step: list[dict]) -> dict:
    """What the curriculum did, for the UI (empty without one): per step the tasks drawn per pass-rate band,
    the groups dropped for equal rewards, refills and retirements (`curriculum_per_step`); the run's totals
    and settings; each task's pass rate at the end and the step it retired at (retired ones first, then the
    hardest; at most 1,000 rows)."""
    if not curriculum:
        return {}
    from awm_rl.training.curriculum import step_row

    rows = [step_row(r["curriculum"]) for r in per_step if r.get("curriculum")]
    config = curriculum["config"]
    totals = {**curriculum.get("totals", {}), "retired_tasks": len(curriculum["retired"]),
              "band": f"{config['band'][0]}-{config['band'][1]}", "out_of_band_weight": config["out_of_band_weight"],
              "dynamic_sampling": "on" if config["dynamic_sampling"] else "off",
              "retire_after": "never" if config["retire_after"] is None else config["retire_after"]}
    tasks = sorted(({"task": task, "pass_rate": rate, "retired_at_step": curriculum["retired"].get(task)}
                    for task, rate in curriculum["pass_rates"].items()),
                   key=lambda t: (t["retired_at_step"] is None, t["pass_rate"] is None, t["pass_rate"] or 0.0))[:1000]
    return {"curriculum_per_step": records_table(rows, list(rows[0]) if rows else ["step"]),
            "curriculum_totals": key_value_table(totals),
            "curriculum_tasks": records_table(tasks, ["task", "pass_rate", "retired_at_step"])}


def _bfcl_over_steps(context: dg.AssetExecutionContext, config: TrainingRunConfig, per_step: list[dict],
                     out_dir: Path, rollout: "RolloutConfig") -> dict:
    """Metadata of the BFCL curve over the run's checkpoints (empty when not asked for). Each checkpoint answers
    with the response budget and temperature it was trained with (`rollout`): a point of the curve measures the
    policy as trained, and a checkpoint that never learned to stop does not sample BFCL's 2,048-token default."""
    if not config.bfcl_categories:
        return {}
    from awm_rl.bfcl.over_training import checkpoints_by_step, evaluate_checkpoints, plot_over_steps
    from awm_rl.bfcl.runner import BFCLPolicyError

    checkpoints = checkpoints_by_step(per_step)
    if not checkpoints:
        context.log.warning("no checkpoint was saved during the run: nothing to evaluate on BFCL (grpo.save_every)")
        return {}
    try:
        rows = evaluate_checkpoints(checkpoints, list(config.bfcl_categories), out_dir=out_dir / "bfcl",
                                    limit=config.bfcl_limit or None, max_new_tokens=rollout.max_response_tokens,
                                    temperature=rollout.temperature)
    except BFCLPolicyError as exc:
        raise dg.Failure(description=f"BFCL over training steps: {exc}", allow_retries=False) from None
    for row in rows:
        context.log.info(f"BFCL {row['category']} at step {row['step']}: {row['accuracy']:.1%} of {row['cases']} case(s)")
    plot = plot_over_steps(rows, out_dir / "bfcl" / "bfcl_over_steps.png")
    return {"bfcl_over_steps": records_table(rows, ["step", "category", "accuracy", "cases"]),
            "bfcl_over_steps_plot": dg.MetadataValue.path(str(plot or ""))}
