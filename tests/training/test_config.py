"""The training config: paper defaults, YAML overrides, and errors that name the file and field."""

from __future__ import annotations

import pytest

from tests.conftest import PROJECT_ROOT


def test_defaults_are_the_papers():
    from awm_rl.training.config import TrainConfig

    c = TrainConfig.model_validate({"model": {"path": "Qwen/Qwen3-4B"}})
    g, r = c.grpo, c.rollout
    assert (g.group_size, g.tasks_per_step, g.mini_batch_tasks, g.updates_per_step) == (16, 64, 16, 4)
    assert (g.learning_rate, g.beta, g.entropy_coef, g.epsilon_high, g.steps) == (7e-7, 0.001, 0.0, 0.28, 96)
    assert (g.importance_sampling_level, g.use_bias_correction_kl, g.engine_correction) == ("token", False, True)
    assert (g.engine_correction_mode, g.engine_correction_min, g.engine_correction_max) == ("sequence_mask", None, 3.0)
    assert (r.temperature, r.max_response_tokens, r.max_context_tokens, r.max_turns) == (1.0, 2048, 32768, 20)
    assert (r.history, r.window, r.effective_window) == ("window", 3, 3)
    assert TrainConfig.model_validate({"model": {"tiny": True}, "rollout": {"history": "full"}}).rollout.effective_window is None


def test_shipped_configs_load():
    from awm_rl.training.config import load_config

    tiny = load_config(PROJECT_ROOT / "configs" / "tiny-cpu.yaml")
    assert tiny.model.tiny and tiny.grpo.group_size == 4 and tiny.grpo.steps == 2
    assert len(tiny.environments.scenarios) == 2
    paper = load_config(PROJECT_ROOT / "configs" / "paper.yaml")
    assert paper.grpo.tasks_per_step == 64 and paper.generation.backend == "vllm"
    assert paper.grpo.importance_sampling_level == "token" and paper.grpo.engine_correction
    assert paper.judge.mode == "sql" and not paper.grpo.use_bias_correction_kl
    node = load_config(PROJECT_ROOT / "configs" / "node-8gpu.yaml")
    assert (node.ray.trainer_workers, node.ray.strategy, node.model.path) == (4, "fsdp", "Qwen/Qwen3-8B")
    assert node.generation.vllm_mode == "server" and node.environments.env_host_resources == {"cpu_worker": 0.01}
    gpu = load_config(PROJECT_ROOT / "configs" / "single-gpu.yaml", {"grpo": {"steps": 1}})
    assert gpu.ray.trainer_num_gpus == 1 and gpu.grpo.steps == 1 and gpu.grpo.group_size == 4


def test_errors_name_the_file_and_field(tmp_path):
    from awm_rl.training.config import ConfigError, load_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {tiny: true}\ngrpo: {lerning_rate: 1.0}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*\n.*grpo\.lerning_rate"):
        load_config(bad)
    bad.write_text("model: {tiny: true}\ngrpo: {tasks_per_step: 10, mini_batch_tasks: 4}\n")
    with pytest.raises(ConfigError, match="multiple of grpo.mini_batch_tasks"):
        load_config(bad)
    bad.write_text("model: {tiny: true}\ngrpo: {engine_correction_min: 2.0, engine_correction_max: 1.5}\n")
    with pytest.raises(ConfigError, match="engine_correction_min"):
        load_config(bad)
    bad.write_text("model: {tiny: true}\nray: {trainer_workers: 3}\n")
    with pytest.raises(ConfigError, match="trainer_workers"):
        load_config(bad)
    bad.write_text("model: {tiny: true}\nray: {trainer_workers: 2, strategy: fsdp}\n")
    with pytest.raises(ConfigError, match="vllm_mode server"):
        load_config(bad)
    bad.write_text("model: {tiny: true, path: x}\n")
    with pytest.raises(ConfigError, match="exactly one of"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_cli_reports_a_bad_config(tmp_path, capsys):
    from awm_rl.training.commands import train_main

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {tiny: true}\nrollout: {max_response_tokens: 9000, max_context_tokens: 4096}\n")
    assert train_main(["--config", str(bad)]) == 2
    assert "max_response_tokens" in capsys.readouterr().err


def test_catalog_errors_are_clear(training_store, tmp_path):
    from awm_resources.store import ArtifactStore
    from awm_rl.training.tasks import CatalogError, read_catalog, select_environments

    with pytest.raises(CatalogError, match="environment_catalog"):
        read_catalog(ArtifactStore(tmp_path))
    entries, version = read_catalog(training_store)
    assert len(version.sha256) == 64 and "gofundme" in version.environments
    with pytest.raises(CatalogError, match="not ready"):
        select_environments(entries, ["no_such_env"], None)
    # A config's default list (tiny-cpu's corpus pair) gives way to the catalog's ready environments.
    ready = sorted(e.name for e in entries)
    assert select_environments(entries, ["no_such_env", "gofundme"], None, "use_catalog") == ready[:2]
    assert select_environments(entries, ["gofundme"], None, "use_catalog") == ["gofundme"]


def test_vllm_is_refused_clearly_without_a_gpu():
    from awm_rl.training.config import TrainConfig
    from awm_rl.training.job import TrainingError, cuda_available, use_vllm

    if cuda_available():
        pytest.skip("a GPU is visible")
    auto = TrainConfig.model_validate({"model": {"tiny": True}})
    assert use_vllm(auto) is False  # auto falls back to transformers on CPU
    forced = TrainConfig.model_validate({"model": {"tiny": True}, "generation": {"backend": "vllm"}})
    with pytest.raises(TrainingError, match="no GPU is visible"):
        use_vllm(forced)


def test_errors_in_the_trainer_actor_reach_the_caller(training_store, tmp_path):
    from awm_rl.training import TrainingError, launch_training, load_config

    config = load_config(PROJECT_ROOT / "configs" / "tiny-cpu.yaml", {
        "environments": {"store_root": str(training_store.root), "scenarios": ["no_such_env"], "if_not_ready": "error"},
        "output_dir": str(tmp_path / "run")})
    events: list[dict] = []
    with pytest.raises(TrainingError, match=r"^environments \['no_such_env'\] are not ready in the catalog"):
        launch_training(config, events.append)
    assert any("trainer actor on node" in e["message"] for e in events)


def test_judge_from_config(monkeypatch):
    from awm_rl.training.config import TrainConfig
    from awm_rl.training.job import TrainingError, build_judge

    assert build_judge(TrainConfig.model_validate({"model": {"tiny": True}})).mode == "code"
    monkeypatch.delenv("AWM_LLM_MODEL", raising=False)
    with pytest.raises(TrainingError, match="judge.llm_model"):
        build_judge(TrainConfig.model_validate({"model": {"tiny": True}, "judge": {"mode": "sql"}}))
    judge = build_judge(TrainConfig.model_validate({"model": {"tiny": True}, "judge": {"mode": "llm", "llm_model": "replay"}}))
    assert judge.mode == "llm" and judge.llm.model == "replay" and judge.llm.temperature == 0.0


def test_data_parallel_strategy_args():
    import importlib.util

    from awm_rl.training.config import TrainConfig
    from awm_rl.training.job import TrainingError, strategy_args

    server = {"model": {"path": "Qwen/Qwen3-8B"}, "generation": {"backend": "vllm", "vllm_mode": "server"}}
    fsdp = strategy_args(TrainConfig.model_validate({**server, "ray": {"trainer_workers": 4, "strategy": "fsdp"}}), True)
    assert fsdp["ddp_backend"] == "nccl" and fsdp["fsdp"] == "full_shard auto_wrap"
    ddp = strategy_args(TrainConfig.model_validate({"model": {"tiny": True}, "ray": {"trainer_workers": 2}}), False)
    assert ddp == {"ddp_backend": "gloo", "ddp_find_unused_parameters": False}
    assert strategy_args(TrainConfig.model_validate({"model": {"tiny": True}}), False) == {}
    zero3 = TrainConfig.model_validate({**server, "ray": {"trainer_workers": 4, "strategy": "zero3"}})
    if importlib.util.find_spec("deepspeed") is None:
        with pytest.raises(TrainingError, match="pip install deepspeed"):
            strategy_args(zero3, True)
    else:
        assert strategy_args(zero3, True)["deepspeed"]["zero_optimization"]["stage"] == 3
