"""`awm bench learn`'s plumbing (the learning claim itself is the bench's job: minutes, not a test's).

Two GRPO steps on one demo task from the untrained tiny model: the JSON has the promised shape, and
since every rollout breaks the format on its first turn (reward -1 for all), no group has reward
variance and the weights must not move (beta 0: zero advantages carry no gradient, and the trainer does not
step the optimiser on such an update). The warm start's
stop rule is checked on its own: it stops before the update of the step where it holds.
"""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture()
def small_bench(monkeypatch):
    from benchmarks import learn

    cfg = learn.TRAIN_CONFIG
    monkeypatch.setitem(cfg, "environments", {**cfg["environments"], "scenarios": ["music_playlists"]})
    monkeypatch.setitem(cfg, "grpo", {**cfg["grpo"], "group_size": 2, "tasks_per_step": 1, "mini_batch_tasks": 1})
    monkeypatch.setitem(cfg, "rollout", {**cfg["rollout"], "max_response_tokens": 96})  # its reference turns: <= 84
    monkeypatch.setitem(learn.WARM_START, "reference_prob", 0.0)  # stop before the first update: untrained
    return learn


def test_two_steps_json_shape_and_no_signal_no_update(small_bench, demo_synthesis, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(demo_synthesis["pristine"], store)
    code = small_bench.main(["--steps", "2", "--store", str(store), "--output", str(tmp_path / "out"), "--json"])
    report = json.loads((tmp_path / "out" / "learn.json").read_text(encoding="utf-8"))
    assert code == 1 and report["all_learned"] is False  # an untrained policy learns nothing in 2 steps
    assert report["steps"] == 2 and len(report["pass_rate"]) == 2 and report["pass_rate"] == [0.0, 0.0]
    assert report["first"] == report["last"] == report["rise"] == 0.0
    [run] = report["runs"]
    assert run["warm_start"]["steps"] == 0 and run["warm_start"]["tasks"] == ["music_playlists/0"]
    assert run["reward_mean"] == [-1.0, -1.0] and run["groups_without_variance"] == [1.0, 1.0]
    assert run["weights"]["param_delta_max"] == 0.0 and run["weights"]["compared_tensors"] > 0
    assert run["updates_skipped"] == [1, 1]  # no advantage anywhere: the optimiser was not stepped
    assert report["config"]["train"]["grpo"]["steps"] == 2
    assert open(report["curve_png"], "rb").read(4) == b"\x89PNG"
    assert "pass rate per GRPO step" in open(report["curve_ascii"], encoding="utf-8").read()


def test_warm_start_stops_before_the_update_where_the_rule_holds(tmp_path):
    import torch

    from awm_rl.tiny_model import build_tiny_qwen3
    from awm_rl.training.warm_start import supervised_steps

    model, tokenizer = build_tiny_qwen3(tmp_path)
    target = tokenizer("Done: the result is above.<|im_end|>", add_special_tokens=False)["input_ids"]
    samples = [([1, 2, 3, 4], target)]
    seen: list[list[float]] = []

    def rule(nll: list[float]) -> bool:
        seen.append(nll)
        return len(seen) == 3

    before = {k: v.clone() for k, v in model.state_dict().items()}
    losses = supervised_steps(model, tokenizer, samples, steps=10, learning_rate=1e-2, stop_when=rule)
    assert len(losses) == 3 and len(seen) == 3 and all(len(n) == 1 for n in seen)
    assert seen[0][0] == pytest.approx(losses[0] * len(target)) and seen[2][0] < seen[0][0]  # NLL in nats, falling
    moved = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert moved  # two updates were made ...
    again = {k: v.clone() for k, v in model.state_dict().items()}
    assert len(supervised_steps(model, tokenizer, samples, steps=10, learning_rate=1e-2, stop_when=lambda n: True)) == 1
    assert all(torch.equal(v, again[k]) for k, v in model.state_dict().items())  # ... and none at a stop
