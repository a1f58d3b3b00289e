"""History-aware samples from real episodes: one per turn, windowed context, loss on the target turn only.

Episodes run the real agent loop against the real Ray environment pool; the policy is the trainer's
`RecordingPolicy` behind a `GenerationBroker`, whose generation is a script of Qwen3 turns turned into
tokens (the reference-solution format), so the test knows exactly what each turn must contain.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

CALLS = [{"tool": "list_active_shop_offers_na_east", "arguments": {}},
         {"tool": "filter_shop_offers_outfit_epic_legendary_cheapest", "arguments": {}},
         {"tool": "get_personal_purchase_summary_last_30_days", "arguments": {}},
         {"tool": "list_active_shop_offers_na_east", "arguments": {}}]


@pytest.fixture(scope="module")
def pool(training_store):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(training_store.root, num_hosts=1, prefetch=1) as p:
        yield p


def scripted_generate(tokenizer, turns: list[str]):
    """Generation that answers turn n of the (single running) episode with script turn n."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    lock, counter = threading.Lock(), [0]

    def generate(prompts):
        out = []
        with lock:
            for _ in prompts:
                out.append(list(tokenizer(turns[counter[0]], add_special_tokens=False)["input_ids"]) + [eos])
                counter[0] += 1
        return out, None
    return generate


def run_scripted(pool, tokenizer, window, tmp_path: Path):
    from awm_rl.agent.loop import EpisodeSpec, LoopConfig
    from awm_rl.agent.policies import solution_turns
    from awm_rl.training.rollouts import GenerationBroker, RecordingPolicy, run_rollouts

    turns = solution_turns(CALLS, "Here are the offers.")
    policy = RecordingPolicy(tokenizer, GenerationBroker(batch_wait_s=0.0), eos_token_ids=[tokenizer.eos_token_id],
                             max_response_tokens=256, max_context_tokens=32768)
    spec = EpisodeSpec("fortnite_item_shop", 1, "List the active shop offers and my purchase summary.")
    (rollout,) = run_rollouts(pool, [spec], policy, scripted_generate(tokenizer, turns),
                              LoopConfig(max_turns=10, window=window, snapshot_dir=tmp_path), concurrency=1)
    return turns, rollout


@pytest.mark.parametrize("window", [1, None])
def test_one_sample_per_turn_with_only_the_target_in_the_loss(pool, tiny_tokenizer, window, tmp_path):
    from awm_rl.agent.loop import discard_snapshot
    from awm_rl.training.samples import collate, render_prompt_ids, samples_from_rollout, turn_context

    tok = tiny_tokenizer
    turns, rollout = run_scripted(pool, tok, window, tmp_path)
    episode = rollout.episode
    discard_snapshot(episode)
    assert episode.termination == "final_answer", episode.termination_detail
    assert [s.response for s in episode.steps] == turns and len(rollout.turns) == len(turns) == 6

    samples = samples_from_rollout(episode, rollout.turns, reward=0.5, advantage=0.7, rollout=3)
    assert [s.turn for s in samples] == list(range(6)) and all(s.advantage == 0.7 for s in samples)
    batch = collate(samples, tok.pad_token_id)
    for i, (sample, text) in enumerate(zip(samples, turns, strict=True)):
        # the context is exactly what the policy was shown: the rendered (windowed) conversation
        assert sample.prompt_ids == render_prompt_ids(tok, turn_context(episode.messages, i, window))
        # the loss mask covers the target turn (and its end token), nothing of the context
        mask = batch["completion_mask"][i].bool()
        assert int(mask.sum()) == len(sample.completion_ids)
        assert tok.decode(batch["completion_ids"][i][mask].tolist(), skip_special_tokens=False) == text + "<|im_end|>"
        assert int(batch["prompt_mask"][i].sum()) == len(sample.prompt_ids)

    last = tok.decode(samples[5].prompt_ids, skip_special_tokens=False)
    assert "I should first discover which tools" in last  # the first list_tools exchange is always kept
    steps_seen = [f"Step {k} of 4" in last for k in (1, 2, 3, 4)]
    if window == 1:
        assert steps_seen == [False, False, False, True]  # only the last exchange besides the first
        assert last.count("<|im_start|>assistant") == 3  # list_tools turn + 1 windowed turn + generation prompt
    else:
        assert steps_seen == [True, True, True, True]
        assert last.count("<|im_start|>assistant") == 6


def test_padding_trimming_and_chunks(tiny_tokenizer):
    import torch

    from awm_rl.training.samples import TurnSample, collate, length_chunks, pad_samples, take_rows, trim_padding

    def sample(p, c):
        return TurnSample(prompt_ids=list(range(3, 3 + p)), completion_ids=list(range(5, 5 + c)), advantage=1.0,
                          reward=1.0, scenario="s", task_idx=0, rollout=0, turn=0)

    padded = pad_samples([sample(4, 2), sample(9, 5), sample(2, 1)], multiple=4, minimum=6)
    assert len(padded) == 8 and [s.padding for s in padded].count(True) == 5
    batch = collate(padded, pad_token_id=0)
    assert batch["completion_mask"][3:].sum() == 0 and batch["advantages"][3:].abs().sum() == 0
    chunks = length_chunks(batch, 3)
    assert sorted(torch.cat(chunks).tolist()) == list(range(8))
    small = trim_padding(take_rows(batch, torch.tensor([0, 2])))
    assert small["prompt_ids"].shape[1] == 4 and small["completion_ids"].shape[1] == 2
    assert small["prompt_ids"][0].tolist() == [3, 4, 5, 6] and small["prompt_mask"][1].tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="no samples"):
        pad_samples([], 2)


def test_mismatched_turns_are_an_error(pool, tiny_tokenizer, tmp_path):
    from awm_rl.training.samples import samples_from_rollout

    _, rollout = run_scripted(pool, tiny_tokenizer, 3, tmp_path)
    with pytest.raises(ValueError, match="6 steps but 5 recorded generations"):
        samples_from_rollout(rollout.episode, rollout.turns[:5], reward=0.0, advantage=0.0, rollout=0)
