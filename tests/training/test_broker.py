"""The generation broker: turns from many episode threads are generated in shared batches."""

from __future__ import annotations

import threading

import pytest


def test_a_failed_batch_is_retried_per_prompt_and_fails_only_the_bad_turn():
    from awm_rl.training.rollouts import GenerationBroker

    broker = GenerationBroker(batch_wait_s=5.0)
    results: dict[int, object] = {}
    calls: list[list[list[int]]] = []

    def episode(i: int) -> None:
        try:
            results[i] = broker.request([i]).result()
        except RuntimeError as exc:
            results[i] = str(exc)
        finally:
            broker.episode_finished()

    def generate(prompts):
        calls.append(prompts)
        if [3] in prompts:  # one poisoned request fails the whole batch it is in
            raise RuntimeError("prompt 3 cannot be generated")
        return [[p[0] * 10] for p in prompts], None

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(5)]
    for t in threads:
        broker.episode_started()
        t.start()
    broker.serve(generate, done=lambda: not any(t.is_alive() for t in threads))
    for t in threads:
        t.join()
    assert len(calls[0]) == 5 and [len(c) for c in calls[1:]] == [1] * 5  # the batch, then each prompt alone
    assert {i: results[i] for i in (0, 1, 2, 4)} == {i: ([i * 10], None) for i in (0, 1, 2, 4)}
    assert results[3] == "prompt 3 cannot be generated"
    assert (broker.failed_batches, broker.retried_prompts, broker.failed_prompts) == (1, 5, 1)
    assert broker.generation_s > 0 and len(broker.generation_spans) == 6


def test_waiting_turns_share_one_batch_and_errors_reach_their_episodes():
    from awm_rl.training.rollouts import GenerationBroker

    broker = GenerationBroker(batch_wait_s=5.0)  # the batch closes when every running episode waits
    results: dict[int, object] = {}
    calls: list[list[list[int]]] = []

    def episode(i: int) -> None:
        try:
            results[i] = broker.request([i, i]).result()
            try:
                broker.request([-1]).result()
            except RuntimeError as exc:
                results[-i - 1] = str(exc)
        finally:
            broker.episode_finished()

    def generate(prompts):
        calls.append(prompts)
        if prompts[0] == [-1]:
            raise RuntimeError("generation failed")
        return [[p[0] * 10] for p in prompts], [[-0.5] for _ in prompts]

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(6)]
    for t in threads:  # six episodes running before the broker serves
        broker.episode_started()
        t.start()
    broker.serve(generate, done=lambda: not any(t.is_alive() for t in threads))
    for t in threads:
        t.join()
    # the failing batch of 6 was retried prompt by prompt; each fails alone too
    assert [len(c) for c in calls] == [6, 6, 1, 1, 1, 1, 1, 1] and broker.batches == [6, 6]
    assert all(results[i] == ([i * 10], [-0.5]) for i in range(6))
    assert all(results[-i - 1] == "generation failed" for i in range(6))
    assert broker.failed_prompts == 6


def test_context_overflow_is_a_policy_error(tiny_tokenizer):
    from awm_rl.agent.policies import PolicyError, PolicyRequest
    from awm_rl.training.rollouts import GenerationBroker, RecordingPolicy

    policy = RecordingPolicy(tiny_tokenizer, GenerationBroker(), eos_token_ids=[tiny_tokenizer.eos_token_id],
                             max_response_tokens=64, max_context_tokens=100)
    request = PolicyRequest(messages=[{"role": "system", "content": "x " * 200}, {"role": "user", "content": "t"}],
                            scenario="s", task_idx=0, turn=0)
    with pytest.raises(PolicyError, match="context overflow at turn 0"):
        policy.generate(request)
