"""End to end on CPU: the ready single-GPU script falls back to the tiny config and runs 2 real GRPO
steps through Ray (trainer actor + environment host actors): weights change, every history-aware
sample carries only its target turn in the loss, metrics and checkpoints are written every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT

STEP_KEYS = {"reward_mean", "reward_std", "completion_rate", "format_error_ratio", "environment_error_ratio",
             "turns_mean", "rollout_s", "step_s", "train_s", "prompt_tokens", "completion_tokens", "samples", "loss",
             "kl", "entropy", "checkpoint", "policy_failure_ratio", "engine_ratio_min", "engine_ratio_mean",
             "engine_ratio_max", "engine_masked_frac", "engine_capped_frac", "policy_ratio/min", "policy_ratio/mean",
             "policy_ratio/max", "generation_s", "env_s", "env_busy_s", "waiting_s", "judge_s", "logps_s"}


@pytest.fixture(scope="module")
def tiny_run(training_store, ray_address, tmp_path_factory):
    """The script as a user runs it, joining the session's Ray cluster (RAY_ADDRESS) rather than starting one."""
    out = tmp_path_factory.mktemp("tiny_run") / "run"
    env = {**os.environ, "AWM_HOME": str(training_store.root), "OUTPUT": str(out), "PYTHON": sys.executable,
           "RAY_ADDRESS": ray_address}
    env.pop("CONFIG", None)
    proc = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "train_single_gpu.sh")], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return out, proc.stdout


@pytest.mark.slow
def test_script_runs_two_steps_on_ray(tiny_run, training_store):
    out, stdout = tiny_run
    assert "no GPU visible: running" in stdout and "tiny-cpu.yaml" in stdout
    assert "trainer actor on node" in stdout  # the job ran in a Ray actor, not in the CLI process
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["scenarios"] == ["fortnite_item_shop", "gofundme"]
    assert summary["generation"] == "transformers" and summary["warm_start"]["kept"] >= 2
    assert summary["os_isolation"].startswith("bubblewrap + seccomp")  # the env hosts' containment
    # Provenance: the catalog read and the version of each environment trained on.
    from awm_resources.provenance import catalog_digest, environment_digest

    catalog = json.loads((training_store.root / "catalog.json").read_text())["environments"]
    assert summary["catalog_digest"] == catalog_digest(catalog) and summary["changed_since_catalog"] == []
    assert summary["environments"] == {k: environment_digest(training_store, k) for k in summary["scenarios"]}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert STEP_KEYS <= set(r), STEP_KEYS - set(r)
        assert r["episodes"] == 16 and -1.0 <= r["reward_mean"] <= 1.0 and r["samples"] >= 8
        assert r["checkpoint"] and (out / os.path.basename(r["checkpoint"]) / "model.safetensors").is_file()
        # transformers generation: the trainer sampled the tokens itself, so the engine ratio is exactly 1
        assert r["engine_ratio_min"] == r["engine_ratio_max"] == 1.0 and r["engine_masked_frac"] == 0
        assert r["policy_ratio/min"] <= r["policy_ratio/mean"] <= r["policy_ratio/max"]
        split = r["generation_s"] + r["env_s"] + r["waiting_s"]
        assert r["generation_s"] > 0 and r["env_s"] > 0 and split == pytest.approx(r["rollout_s"], abs=0.05)
        assert r["env_busy_s"] >= r["env_s"]
    assert (out / "final" / "model.safetensors").is_file() and (out / "curves.png").stat().st_size > 5000
    times = summary["time_split"]
    assert 0 < times["env_share"] < 1 and times["step_s"] > 0
    assert "environments take" in stdout and "of a step" in stdout  # the summary line `awm train` prints


@pytest.mark.slow
def test_weights_changed(tiny_run):
    from safetensors.torch import load_file

    out, _ = tiny_run
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    if min(r["frac_reward_zero_std"] for r in records) == 1.0:
        outcomes = [(e["scenario"], e["reward"], e.get("outcome")) for step in ("step_0001", "step_0002") for e in
                    map(json.loads, (out / "steps" / step / "episodes.jsonl").read_text().splitlines())]
        warm = json.loads((out / "summary.json").read_text())["warm_start"]
        pytest.fail(f"no group had reward variance, nothing to learn: warm start {warm}, episodes {outcomes}")
    before = load_file(str(out / "warm_start" / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert before.keys() == after.keys()
    moved = [k for k in before if not (before[k] == after[k]).all()]
    assert moved, "GRPO left every weight unchanged"
    assert json.loads((out / "summary.json").read_text())["weights"]["param_delta_max"] > 0


@pytest.mark.slow
def test_history_aware_samples_carry_only_their_turn(tiny_run):
    from transformers import AutoTokenizer

    from awm_rl.agent.qwen3 import META_TOOLS
    from awm_rl.training.samples import turn_context

    out, _ = tiny_run
    tok = AutoTokenizer.from_pretrained(str(out / "final"))
    window = json.loads((out / "config.json").read_text())["rollout"]["window"]
    checked = 0
    for step in ("step_0001", "step_0002"):
        episodes = [json.loads(line) for line in (out / "steps" / step / "episodes.jsonl").read_text().splitlines()]
        samples = [json.loads(line) for line in (out / "steps" / step / "samples.jsonl").read_text().splitlines()]
        real = [s for s in samples if not s["padding"]]
        assert len(real) == sum(e["turns"] for e in episodes)  # one sample per model turn
        assert all(s["loss_tokens"] == 0 for s in samples if s["padding"])
        for sample in real:
            episode = episodes[sample["rollout"]]
            response = episode["steps"][sample["turn"]]["response"]
            context = turn_context(episode["messages"], sample["turn"], window)
            expected_prompt = tok.apply_chat_template(context, tools=META_TOOLS, add_generation_prompt=True, tokenize=False)
            assert sample["prompt_text"] == expected_prompt
            assert sample["completion_text"] in (response + "<|im_end|>", response)  # the turn only (EOS unless cut)
            assert sample["loss_tokens"] > 0 and sample["reward"] == pytest.approx(episode["reward"], abs=1e-6)
            checked += 1
    assert checked >= 32


@pytest.mark.slow
def test_the_tiny_tokenizer_is_fitted_to_the_runs_listings(tiny_run):
    """The tiny policy's tokenizer was trained on these environments' tool listings with merges across words:
    a listing is a few hundred tokens (the generic tokenizer of `build_tiny_qwen3()` made the longest prompt
    2,908 tokens), and the generic one is not what the run used."""
    from transformers import AutoTokenizer

    from awm_rl.agent.tiny_model import build_tokenizer

    out, stdout = tiny_run
    assert "policy " in stdout and "/models/tiny-qwen3-" in stdout  # a folder per fitted tokenizer
    fitted = AutoTokenizer.from_pretrained(str(out / "final"))
    samples = [json.loads(line) for step in ("step_0001", "step_0002")
               for line in (out / "steps" / step / "samples.jsonl").read_text().splitlines()]
    prompts = [s["prompt_text"] for s in samples if not s["padding"]]
    longest = max(prompts, key=len)
    generic = build_tokenizer()
    assert len(fitted(longest)["input_ids"]) * 2.5 < len(generic(longest)["input_ids"])
    assert max(s["prompt_tokens"] for s in samples) < 1200
