"""An update whose loss has no gradient does not step the optimiser (objective.carries_gradient, the trainer's hook).

Why it matters, by hand: AdamW on a zero gradient after one real update still moves each weight by
lr * m_hat / (sqrt(v_hat) + eps) (about 0.67 lr on the second update), along the momentum of a past batch.
Checked on the real trainer (tiny Qwen3, TRL's loss, the Trainer's callback dispatch, torch's AdamW): a
zero-advantage update leaves the weights and the optimiser's state as they were, and the next real update
is AdamW's second step computed by hand.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

LR, B1, B2, EPS = 1e-2, 0.9, 0.999, 1e-8


def test_carries_gradient():
    from awm_rl.training.objective import carries_gradient

    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    zero = torch.zeros(3)
    assert not carries_gradient(zero, mask, beta=0.0, entropy_bonus=False)
    assert not carries_gradient(torch.tensor([0.0, 0.0, 2.0]), mask, beta=0.0, entropy_bonus=False)  # filler row only
    assert carries_gradient(torch.tensor([0.0, -0.5, 0.0]), mask, beta=0.0, entropy_bonus=False)
    assert carries_gradient(zero, mask, beta=0.01, entropy_bonus=False)  # the KL term has a gradient
    assert carries_gradient(zero, mask, beta=0.0, entropy_bonus=True)
    per_token = torch.zeros(3, 3)
    per_token[0, 2] = 1.0  # outside the loss mask
    assert not carries_gradient(per_token, mask, beta=0.0, entropy_bonus=False)
    per_token[1, 0] = 1.0
    assert carries_gradient(per_token, mask, beta=0.0, entropy_bonus=False)


def _adamw_by_hand(theta0, grads):
    """AdamW (weight decay 0) by its formula: m, v moving averages, bias-corrected, step lr * m_hat / (sqrt(v_hat) + eps)."""
    theta, m, v = theta0.clone(), torch.zeros_like(theta0), torch.zeros_like(theta0)
    for t, g in enumerate(grads, start=1):
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        theta = theta - LR * (m / (1 - B1 ** t)) / ((v / (1 - B2 ** t)).sqrt() + EPS)
    return theta


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from datasets import Dataset
    from trl import GRPOConfig

    from awm_rl.agent.loop import LoopConfig
    from awm_rl.agent.tiny_model import MODEL_FOLDER, build_tiny_qwen3
    from awm_rl.training.trainer import AWMGRPOTrainer, RolloutContext, awm_episode_reward

    root = tmp_path_factory.mktemp("skip_update")
    build_tiny_qwen3(root)
    args = GRPOConfig(output_dir=str(root / "out"), use_cpu=True, num_generations=2, per_device_train_batch_size=4,
                      gradient_accumulation_steps=1, beta=0.0, max_completion_length=8, report_to="none",
                      learning_rate=LR, adam_beta1=B1, adam_beta2=B2, adam_epsilon=EPS, weight_decay=0.0,
                      model_init_kwargs={"dtype": "float32"}, remove_unused_columns=False, seed=0)
    context = RolloutContext(pool=None, judge=None, records={}, loop_config=LoopConfig(), schedule=[], out_dir=root,
                             max_context_tokens=64)
    out = AWMGRPOTrainer(model=str(root / MODEL_FOLDER), reward_funcs=[awm_episode_reward], args=args,
                         train_dataset=Dataset.from_list([{"prompt": "p", "awm_reward": 0.0}] * 4), awm=context)
    out.model.train()
    out.current_gradient_accumulation_steps = 1
    out.create_optimizer()
    return out


def _batch(trainer, advantages):
    from awm_rl.training.samples import TurnSample, collate

    rows = [([5, 9, 14], [20, 21, 22]), ([5, 9, 14], [23, 2]), ([7, 8], [24, 25, 26]), ([7, 8], [29])]
    samples = [TurnSample(prompt_ids=p, completion_ids=c, advantage=a, reward=0.0, scenario="s", task_idx=0,
                          rollout=i, turn=0) for i, ((p, c), a) in enumerate(zip(rows, advantages, strict=True))]
    batch = collate(samples, trainer._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


def _update(trainer, advantages):
    """One update as the Trainer's loop runs it: loss, backward, the pre-step callbacks, the optimiser step.
    Returns the gradient the optimiser saw (None when the hook dropped it)."""
    loss = trainer.compute_loss(trainer.model, _batch(trainer, advantages))
    loss.backward()
    trainer.callback_handler.on_pre_optimizer_step(trainer.args, trainer.state, trainer.control)
    param = trainer.model.lm_head.weight if trainer.model.lm_head.weight.requires_grad else None
    grad = None if param is None or param.grad is None else param.grad.detach().clone()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return grad


def test_an_update_without_signal_leaves_weights_and_optimizer_state(trainer):
    param = trainer.model.lm_head.weight
    theta0 = param.detach().clone()
    g1 = _update(trainer, [1.0, -1.0, 0.5, -0.5])
    assert g1 is not None and g1.abs().sum() > 0
    theta1 = param.detach().clone()
    assert torch.allclose(theta1, _adamw_by_hand(theta0, [g1]), atol=1e-6)

    # What stepping anyway would do: AdamW's momentum moves the weights on a zero gradient.
    drift = _adamw_by_hand(theta0, [g1, torch.zeros_like(g1)])
    assert (drift - theta1).abs().max() > 0.5 * LR

    skipped_before = trainer.awm_skipped_updates
    assert _update(trainer, [0.0, 0.0, 0.0, 0.0]) is None  # the hook dropped the (zero) gradients
    assert trainer.awm_skipped_updates == skipped_before + 1
    assert torch.equal(param.detach(), theta1)
    assert all(int(state["step"]) == 1 for state in trainer.optimizer.state.values())

    g3 = _update(trainer, [-1.0, 1.0, 0.0, 0.0])
    assert g3 is not None
    assert torch.allclose(param.detach(), _adamw_by_hand(theta0, [g1, g3]), atol=1e-6)  # AdamW's step 2, not 3
    assert all(int(state["step"]) == 2 for state in trainer.optimizer.state.values())
