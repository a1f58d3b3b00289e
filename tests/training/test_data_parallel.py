"""Two data-parallel trainer workers (Ray Train TorchTrainer, gloo) on this machine, tiny model, 2 GRPO steps.

Each worker runs its share of every step's rollouts against its own environment hosts, generates its own
turn batches (no collective per batch), and the workers meet only at fixed points (rewards gathered for
the group advantages, sample counts, gradients): the run must finish, with rank 0's step records
covering both workers' rollouts.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import PROJECT_ROOT


@pytest.mark.slow
def test_two_trainer_workers_on_gloo(training_store, ray_address, tmp_path, monkeypatch):
    """On the session's Ray cluster (a cluster of its own cost a start and its idle daemons)."""
    from awm_rl.training import launch_training, load_config

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    out = tmp_path / "run"
    config = load_config(PROJECT_ROOT / "configs" / "tiny-cpu.yaml", {
        "environments": {"store_root": str(training_store.root)}, "output_dir": str(out),
        "grpo": {"steps": 2, "group_size": 2, "tasks_per_step": 4, "mini_batch_tasks": 2},
        "warm_start": {"enabled": False}, "log_samples": False, "tensorboard": False,
        "ray": {"trainer_workers": 2, "trainer_num_cpus": 0, "torch_threads": 1}})
    events: list[dict] = []
    summary = launch_training(config, events.append)
    assert summary["steps"] == 2 and summary["trainer_workers"] == 2 and summary["trainer_processes"] == 2
    assert any("2 data-parallel trainer workers (ddp, gloo)" in e.get("message", "") for e in events)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["episodes"] == 8 for r in records)  # 4 tasks x G=2, merged over both workers
    rank1 = [json.loads(line) for line in (out / "rank1" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rank1] == [1, 2] and all(r["episodes"] == 8 for r in rank1)
    assert (out / "final" / "model.safetensors").is_file() and (out / "summary.json").is_file()
