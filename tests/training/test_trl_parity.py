"""The trainer's advantages, masks, log-probs, engine correction and loss against stock TRL on one fixed batch.

Stock `GRPOTrainer` scores the batch through a `rollout_func` that returns fixed tokens (and, for the
engine correction, fixed sampling log-probs); `AWMGRPOTrainer` gets the same rows as per-turn samples.
Both load the same tiny Qwen3 (CPU, real TRL and torch): every number must agree.
"""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

PROMPTS = [[5, 9, 14, 30], [5, 9, 14, 30], [7, 8], [7, 8], [40, 41, 42, 43, 44, 45], [40, 41, 42, 43, 44, 45],
           [11, 12, 13], [11, 12, 13]]
COMPLETIONS = [[20, 21, 22], [23, 2], [24, 25, 26, 27, 28], [29], [31, 32], [33, 34, 35, 36], [37, 38], [39, 46, 47]]
REWARDS = [1.0, 0.1, -1.0, None, 0.0, 0.0, 1.0, -1.0]  # row 3: a policy-side failure (unscorable)
G = 2


def _sampling_logps(old: list[list[float]]) -> list[list[float]]:
    """Engine log-probs near the trainer's: some turns within [min, max], one far above (masked)."""
    shifts = [0.05, -0.1, 0.3, 0.0, -0.02, 0.2, -2.0, 0.1]
    return [[v + shifts[i] / len(row) for v in row] for i, row in enumerate(old)]


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from awm_rl.agent.tiny_model import MODEL_FOLDER, build_tiny_qwen3
    from awm_rl.training.trainer import AWMGRPOTrainer, RolloutContext, awm_episode_reward

    root = tmp_path_factory.mktemp("parity")
    build_tiny_qwen3(root)
    path = str(root / MODEL_FOLDER)
    state = {"logps": None}

    def fixed_rollout(prompts, trainer):
        return {"prompt_ids": PROMPTS, "completion_ids": COMPLETIONS, "logprobs": state["logps"]}

    def args(**kw):
        return GRPOConfig(output_dir=str(root / "out"), use_cpu=True, num_generations=G, per_device_train_batch_size=4,
                          steps_per_generation=2, gradient_accumulation_steps=1, beta=0.01, max_completion_length=8,
                          importance_sampling_level="token", use_bias_correction_kl=False, report_to="none", loss_type="grpo",
                          vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_max=3.0,
                          model_init_kwargs={"dtype": "float32"}, remove_unused_columns=False, seed=0, **kw)

    dataset = Dataset.from_list([{"prompt": "p", "awm_reward": 0.0}] * 8)
    stock = GRPOTrainer(model=path, reward_funcs=[awm_episode_reward], args=args(), train_dataset=dataset,
                        rollout_func=fixed_rollout)
    from awm_rl.agent.loop import LoopConfig

    context = RolloutContext(pool=None, judge=None, records={}, loop_config=LoopConfig(), schedule=[], out_dir=root,
                             max_context_tokens=64, micro_batch_samples=3)
    ours = AWMGRPOTrainer(model=path, reward_funcs=[awm_episode_reward], args=args(), train_dataset=dataset,
                          awm=context)
    ours.model.load_state_dict(stock.model.state_dict())
    for t in (stock, ours):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    return stock, ours, state


def _inputs():
    return [{"prompt": "p", "awm_reward": r} for r in REWARDS]


def _our_batch(ours, advantages, sampling=None, filler=0):
    from awm_rl.training.samples import TurnSample, collate, pad_samples

    if len(advantages) == len(SCORED):  # one per scorable row: spread over all rows
        full = [0.0] * len(REWARDS)
        for i, a in zip(SCORED, advantages, strict=True):
            full[i] = float(a)
        advantages = full
    samples = [TurnSample(prompt_ids=p, completion_ids=c, advantage=float(a), reward=0.0, scenario="s", task_idx=i,
                          rollout=i, turn=0, sampling_logprobs=None if sampling is None else sampling[i])
               for i, (p, c, a, r) in enumerate(zip(PROMPTS, COMPLETIONS, advantages, REWARDS, strict=True))
               if r is not None]
    if filler:
        samples = pad_samples(samples, len(samples) + filler)
    batch = collate(samples, ours._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


def _stock_rows(batch, rows):
    from awm_rl.training.samples import take_rows, trim_padding

    return trim_padding(take_rows(batch, torch.tensor(rows)))


SCORED = [i for i, r in enumerate(REWARDS) if r is not None]


def test_advantages_masks_and_logps_match_stock(trainers):
    from awm_rl.training.objective import group_advantages

    stock, ours, state = trainers
    state["logps"] = None
    ours.awm.micro_batch_samples = 3
    expected = stock._generate_and_score_completions(_inputs())
    rewards_per_func = ours._calculate_rewards(_inputs(), ["p"] * 8, ["c"] * 8, COMPLETIONS)
    rewards, advantages, _ = group_advantages(rewards_per_func, ours.reward_weights, G, ours.scale_rewards)
    assert torch.allclose(advantages, expected["advantages"], atol=1e-6)
    assert advantages[3] == 0 and advantages[2] == 0  # the failure is out of its group: its partner has no baseline
    assert torch.isnan(rewards[3]) and advantages[0] > 0 > advantages[1]

    batch = _our_batch(ours, advantages)
    ref = _stock_rows(expected, SCORED)
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(batch[key], ref[key]), key
    ours._add_logps(batch)
    mask = batch["completion_mask"].bool()
    for key in ("old_per_token_logps", "ref_per_token_logps"):
        # ours runs length-grouped micro-batches of 3 rows with less left padding: positions shift, and
        # RoPE at other angles differs in float32 rounding only (about 1e-3 on log-probs near -7)
        assert torch.allclose(batch[key][mask], ref[key][mask], atol=2e-3), key
        assert not torch.allclose(batch[key][mask], torch.zeros_like(batch[key][mask]))


@pytest.mark.parametrize("filler,micro", [(0, 100), (3, 100), (3, 3)])
def test_loss_and_gradients_match_stock_over_real_rows(trainers, filler, micro):
    """One micro-batch: the same padding as stock, so equal to float rounding. Micro-batches of 3 rows
    (all but the last backpropagated inside compute_loss) pad prompts less: positions shift, so the
    policy's log-probs (hence ratios, loss and gradients) agree to about 1e-3."""
    stock, ours, state = trainers
    ours.awm.micro_batch_samples = micro
    state["logps"] = None
    expected = stock._generate_and_score_completions(_inputs())
    ref = _stock_rows(expected, SCORED)  # stock on the scorable rows only
    model = stock.model
    model.zero_grad()
    stock_loss = stock._compute_loss(model, ref)
    stock_loss.backward()
    stock_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]

    batch = _our_batch(ours, ref["advantages"], filler=filler)
    for key in ("old_per_token_logps", "ref_per_token_logps"):
        padded = torch.zeros(batch["completion_ids"].shape)
        padded[:len(SCORED), :ref[key].size(1)] = ref[key]
        batch[key] = padded
    model.zero_grad()
    loss = ours.compute_loss(model, batch)  # micro-batches of 3 rows: all but the last backpropagated inside
    loss.backward()
    our_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    exact = micro >= len(SCORED) + filler
    assert float(loss) == pytest.approx(float(stock_loss), rel=1e-5 if exact else 0, abs=1e-7 if exact else 1e-4)
    assert len(our_grads) == len(stock_grads) and any(g.abs().sum() > 0 for g in stock_grads)
    if exact:
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(our_grads, stock_grads, strict=True))
    else:  # relative L2 error per tensor (about 1e-2: the shifted positions' rounding, through A * grad log p)
        worst = max(float((a - b).norm() / b.norm().clamp(min=1e-12))
                    for a, b in zip(our_grads, stock_grads, strict=True))
        assert worst < 3e-2, worst
    assert ours._metrics["train"]["policy_ratio/max"]  # the policy ratio's statistics are logged per update


def test_engine_correction_matches_stock_vllm_path(trainers):
    """TRL's vLLM correction (sequence_mask, cap 3): the same ratios, and the same loss with it folded into
    the advantages; what it masks is counted instead of dropped silently."""
    stock, ours, state = trainers
    state["logps"] = None
    plain = stock._generate_and_score_completions(_inputs())
    old = [row[:len(c)].tolist() for row, c in zip(plain["old_per_token_logps"], COMPLETIONS, strict=True)]
    state["logps"] = _sampling_logps(old)
    stock.use_vllm, stock.vllm_importance_sampling_correction = True, True
    stock._last_loaded_step = stock.state.global_step  # no vLLM engine to sync weights to
    try:
        expected = stock._generate_and_score_completions(_inputs())
        ref = _stock_rows(expected, SCORED)
        model = stock.model
        stock_loss = stock._compute_loss(model, ref)
    finally:
        stock.use_vllm, stock.vllm_importance_sampling_correction = False, True
    sampling = [[v for v in row] for row in state["logps"]]
    batch = _our_batch(ours, ref["advantages"], sampling=sampling)
    assert ours.awm_engine_correction and not ours.vllm_importance_sampling_correction
    ours.awm.micro_batch_samples = 100  # one micro-batch: the same padding as stock
    stats = ours._add_logps(batch)
    ratio = expected["importance_sampling_ratio"][SCORED]
    folded = batch["advantages"]
    assert folded.shape == (len(SCORED), 1)
    assert torch.allclose(folded[:, 0], ref["advantages"] * ratio[:, 0], atol=1e-5)
    # row 6 (log-ratio +2.0 > log 3) is masked: counted, not silent
    assert stats["engine_masked"] == 1 and stats["engine_masked_frac"] == pytest.approx(1 / len(SCORED))
    assert stats["engine_ratio_max"] == pytest.approx(float(torch.exp(torch.tensor(2.0))), rel=1e-4)
    assert stats["engine_ratio_min"] == pytest.approx(float(torch.exp(torch.tensor(-0.3))), rel=1e-4)
    loss = ours.compute_loss(stock.model, batch)
    assert float(loss) == pytest.approx(float(stock_loss), rel=1e-5, abs=1e-7)


def test_engine_ratio_modes_on_a_fixed_batch():
    from awm_rl.training.objective import engine_ratio

    old = torch.tensor([[-1.0, -1.0, 0.0], [-2.0, -0.5, -0.5], [-1.0, 0.0, 0.0]])
    sampling = torch.tensor([[-1.5, -1.5, 0.0], [-1.0, -0.5, float("nan")], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])  # row 2: filler
    ratio, stats = engine_ratio(old, sampling, mask, "sequence_truncate", 0.5, 2.0)
    assert ratio.shape == (3, 1) and ratio[0, 0] == pytest.approx(2.0) and ratio[1, 0] == pytest.approx(0.5)
    assert stats["engine_capped"] == 2 and stats["engine_units"] == 2 and stats["engine_logp_missing"] == 1
    assert stats["engine_ratio_max"] == pytest.approx(float(torch.exp(torch.tensor(1.0))))
    ratio, stats = engine_ratio(old, sampling, mask, "token_mask", None, 1.5)
    assert ratio.shape == (3, 3) and ratio[0, 0] == 0 and ratio[1, 0] == pytest.approx(float(torch.exp(torch.tensor(-1.0))))
    assert stats["engine_masked"] == 2 and stats["engine_units"] == 5
    ratio, stats = engine_ratio(old, None, mask, "sequence_mask", None, 3.0)  # transformers: the trainer sampled
    assert torch.equal(ratio, torch.ones(3, 1)) and stats["engine_masked"] == 0 and stats["engine_ratio_mean"] == 1.0


# -- the private TRL API the trainer relies on ---------------------------------------------------------------
EXPECTED_SIGNATURES = {
    "_generate_and_score_completions": ["self", "inputs"],
    "compute_loss": ["self", "model", "inputs", "return_outputs", "num_items_in_batch"],
    "_compute_loss": ["self", "model", "inputs"],
    "_generate_single_turn": ["self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_get_per_token_logps_and_entropies": ["self", "model", "input_ids", "attention_mask", "logits_to_keep",
                                           "batch_size", "compute_entropy"],
    "_prepare_inputs": ["self", "generation_batch"],
}
EXPECTED_ATTRIBUTES = ("use_vllm", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                       "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max", "num_generations",
                       "num_generations_eval", "scale_rewards", "reward_weights", "eos_token_ids", "beta", "ref_model",
                       "loss_type", "epsilon_low", "epsilon_high", "max_completion_length", "_metrics", "_tokenizer")


def test_trl_is_pinned_and_its_private_api_is_as_expected(trainers):
    import importlib.metadata
    import tomllib

    import trl

    from tests.conftest import PROJECT_ROOT

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    pinned = [dep for dep in project["dependencies"] if dep.startswith("trl")]
    assert pinned and all("==" in dep for dep in pinned), pinned
    version = pinned[0].split("==")[1].strip()
    assert importlib.metadata.version("trl") == version == trl.__version__
    for name, params in EXPECTED_SIGNATURES.items():
        method = getattr(trl.GRPOTrainer, name, None)
        assert method is not None, f"trl.GRPOTrainer.{name} is gone"
        names = list(inspect.signature(method).parameters)
        assert names[:len(params)] == params, f"trl.GRPOTrainer.{name}{inspect.signature(method)}"
    stock, _, _ = trainers
    missing = [a for a in EXPECTED_ATTRIBUTES if not hasattr(stock, a)]
    assert not missing, f"GRPOTrainer attributes the trainer reads are gone: {missing}"
    assert "use_bias_correction_kl" in inspect.signature(trl.GRPOConfig).parameters


def test_kl_is_plain_by_default(tmp_path):
    from awm_rl.training.config import TrainConfig
    from awm_rl.training.job import grpo_args

    config = TrainConfig.model_validate({"model": {"tiny": True}})
    args = grpo_args(config, tmp_path, vllm=False)
    assert args.use_bias_correction_kl is False and args.importance_sampling_level == "token"
    assert (args.vllm_importance_sampling_correction, args.vllm_importance_sampling_mode,
            args.vllm_importance_sampling_clip_max) == (True, "sequence_mask", 3.0)
