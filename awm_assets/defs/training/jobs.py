"""`training_job` and its weekly schedule (off by default)."""

import dagster as dg

from awm_assets.defs.training.training_asset import DEFAULT_CONFIG, grpo_training

training_job = dg.define_asset_job("training_job", selection=[grpo_training],
                                   description="GRPO training on the current environment catalog.")


def training_run_config(config_path: str = DEFAULT_CONFIG, steps: int = 0, scenarios: list[str] | None = None,
                        overrides_yaml: str = "", bfcl_categories: list[str] | None = None, bfcl_limit: int = 5) -> dict:
    """Run config for `training_job` / `grpo_training`."""
    return {"ops": {"grpo_training": {"config": {"config_path": config_path, "steps": steps,
                                                 "scenarios": list(scenarios or []), "overrides_yaml": overrides_yaml,
                                                 "bfcl_categories": list(bfcl_categories or []),
                                                 "bfcl_limit": bfcl_limit}}}}


training_schedule = dg.ScheduleDefinition(
    name="periodic_training", job=training_job, cron_schedule="0 3 * * 1",
    run_config=training_run_config(), default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly GRPO run on the current catalog (off by default; point config_path at a GPU config).",
)
