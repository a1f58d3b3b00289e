"""`awm bench learn`'s plumbing (the learning claim itself is the bench's job: minutes, not a test's).

On one demo environment: the chosen task's reference passes its verifier and its decoys (one argument value
changed) are replayed through the real loop and pool and confirmed failing by it; the bench's catalog leaves
every other task out; then two GRPO steps from the UNtrained tiny model (the warm start's coverage target 0
stops it before its first update): every rollout breaks the format on its first turn (reward -1 for all),
no group has reward variance and the weights must not move (beta 0: zero advantages carry no gradient, and
the trainer does not step the optimiser on such an update); the JSON has the promised shape. The warm
start's stop rule is checked on its own: it stops before the update of the step where it holds.
"""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture()
def small_bench(monkeypatch):
    from benchmarks import learn

    cfg = learn.TRAIN_CONFIG
    monkeypatch.setattr(learn, "DEMO_SCENARIOS", ["music_playlists"])
    monkeypatch.setitem(cfg, "environments", {**cfg["environments"], "scenarios": ["music_playlists"]})
    monkeypatch.setitem(cfg, "grpo", {**cfg["grpo"], "group_size": 2, "tasks_per_step": 1, "mini_batch_tasks": 1})
    monkeypatch.setitem(cfg, "rollout", {**cfg["rollout"], "max_response_tokens": 96})  # its turns: fewer tokens
    monkeypatch.setitem(learn.WARM_START, "coverage", 0.0)  # stop before the first update: untrained
    return learn


def test_decoys_fail_the_verifier_json_shape_and_no_signal_no_update(small_bench, demo_pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(demo_pristine, store)
    code = small_bench.main(["--steps", "2", "--store", str(store), "--output", str(tmp_path / "out"), "--json"])
    report = json.loads((tmp_path / "out" / "learn.json").read_text(encoding="utf-8"))
    assert code == 1 and report["all_learned"] is False  # an untrained policy learns nothing in 2 steps
    # the task: the first one whose reference passes and that has 2 decoys its verifier fails
    decoys = report["decoys"]
    [task] = decoys["tasks"]
    [chosen] = [t for t in decoys["tried"] if t.get("chosen")]
    assert chosen["task"] == task and chosen["reference"] == "Completed" and decoys["decoys_per_task"] == 2
    assert len(chosen["decoys"]) == 2
    for d in chosen["decoys"]:
        assert d["verdict"] in ("Agent Error", "Partially Completed") and d["decoy"] != d["reference"]
    earlier = decoys["tried"][:decoys["tried"].index(chosen)]
    assert all(not t.get("chosen") for t in earlier)  # each skipped: its verifier passed every candidate, or ...
    catalog = json.loads((tmp_path / "out" / "catalog.json").read_text(encoding="utf-8"))
    [entry] = [e for e in catalog["environments"] if e["name"] == "music_playlists"]
    assert [i for i in range(entry["tasks"]) if i not in entry["excluded_tasks"]] == [int(task.split("/")[1])]
    # the run
    assert report["steps"] == 2 and len(report["pass_rate"]) == 2 and report["pass_rate"] == [0.0, 0.0]
    assert report["first"] == report["last"] == report["rise"] == 0.0
    [run] = report["runs"]
    warm = run["warm_start"]
    assert warm["steps"] == 0 and warm["tasks"] == [task] and warm["episodes"] == 3
    assert warm["samples"] < 3 * 4  # the turns the three episodes share are one sample each
    assert run["reward_mean"] == [-1.0, -1.0] and run["groups_without_variance"] == [1.0, 1.0]
    assert run["weights"]["param_delta_max"] == 0.0 and run["weights"]["compared_tensors"] > 0
    assert run["updates_skipped"] == [1, 1]  # no advantage anywhere: the optimiser was not stepped
    assert report["config"]["train"]["grpo"]["steps"] == 2
    assert "decoy" in report["warm_start"]
    assert open(report["curve_png"], "rb").read(4) == b"\x89PNG"
    assert "pass rate per GRPO step" in open(report["curve_ascii"], encoding="utf-8").read()


def test_warm_start_stops_before_the_update_where_the_rule_holds(tmp_path):
    import torch

    from awm_rl.agent.tiny_model import build_tiny_qwen3
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
