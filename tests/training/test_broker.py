"""The generation broker: turns from many episode threads are generated in shared batches."""

from __future__ import annotations

import threading

import pytest


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
    assert [len(c) for c in calls] == [6, 6] and broker.batches == [6, 6]
    assert all(results[i] == ([i * 10], [-0.5]) for i in range(6))
    assert all(results[-i - 1] == "generation failed" for i in range(6))


def test_context_overflow_is_a_policy_error(tiny_tokenizer):
    from awm_rl.agent.policies import PolicyError, PolicyRequest
    from awm_rl.training.rollouts import GenerationBroker, RecordingPolicy

    policy = RecordingPolicy(tiny_tokenizer, GenerationBroker(), eos_token_ids=[tiny_tokenizer.eos_token_id],
                             max_response_tokens=64, max_context_tokens=100)
    request = PolicyRequest(messages=[{"role": "system", "content": "x " * 200}, {"role": "user", "content": "t"}],
                            scenario="s", task_idx=0, turn=0)
    with pytest.raises(PolicyError, match="context overflow at turn 0"):
        policy.generate(request)
