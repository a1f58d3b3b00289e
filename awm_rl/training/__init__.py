"""GRPO training on the environment catalog (TRL + Ray): config, rollouts, per-turn samples, trainer, launcher.

Entry points: `launch_training(config, on_event)` (Ray actor; the CLI and Dagster use it),
`run_training(config, on_event)` (in this process), `load_config(path, overrides)`.
"""

from awm_rl.training.config import ConfigError, TrainConfig, config_from_dict, load_config
from awm_rl.training.job import TrainingError, run_training
from awm_rl.training.launcher import launch_training

__all__ = ["ConfigError", "TrainConfig", "TrainingError", "config_from_dict", "launch_training", "load_config",
           "run_training"]
