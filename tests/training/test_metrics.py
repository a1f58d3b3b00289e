"""Step metrics: policy-side failures counted on their own, the rollout time split, the summary line."""

from __future__ import annotations

import threading
import time

import pytest


def _episode(termination: str, detail: str = "", turns: int = 1):
    from awm_rl.agent.episode import Episode, Step

    steps = [Step(turn=i, response="r", format={"ok": True}) for i in range(turns)]
    return Episode(scenario="s", task_idx=0, task="t", policy="p", window=3, max_turns=4, steps=steps,
                   termination=termination, termination_detail=detail)


def test_policy_failures_are_their_own_ratio_and_out_of_the_reward():
    from awm_rl.agent.episode import EpisodeScore
    from awm_rl.reward import score_episode
    from awm_rl.training.metrics import is_policy_failure, rollout_metrics

    episodes = [_episode("format_error"), _episode("environment_error", "500"),
                _episode("policy_error", "context overflow at turn 3: ..."), _episode("policy_error", "RuntimeError: x"),
                _episode("final_answer")]
    scores = [score_episode(e) for e in episodes[:4]] + [EpisodeScore(outcome="completed", reward=1.0, step_rewards=[1.0], reasons="ok")]
    assert [is_policy_failure(e) for e in episodes] == [False, False, True, True, False]
    m = rollout_metrics(episodes, scores)
    assert m["policy_failures"] == 2 and m["policy_failure_ratio"] == 0.4 and m["context_overflows"] == 1
    assert m["environment_error_ratio"] == 0.2  # the real environment error only
    assert m["reward_mean"] == pytest.approx((-1.0 + 0.0 + 1.0) / 3)  # failures are not scored 0


def test_rollout_time_splits_into_generation_environments_and_waiting():
    from awm_rl.training.rollouts import BusyClock, GenerationBroker, TimedPool, overlap_s, time_split

    assert overlap_s([(0, 2), (5, 6)], [(1, 5.5)]) == pytest.approx(1.5)

    class SlowPool:
        def call_tool(self, handle, name, arguments):
            time.sleep(0.05)
            return "ok"

        def prefetch_instances(self, scenario, n):
            return n

    clock = BusyClock()
    pool = TimedPool(SlowPool(), clock)
    started = time.perf_counter()
    threads = [threading.Thread(target=pool.call_tool, args=(None, "x", {})) for _ in range(4)]
    for t in threads:  # four overlapping calls: about 0.05 s of wall time, 0.2 s of call time
        t.start()
    for t in threads:
        t.join()
    assert pool.prefetch_instances("s", 3) == 3 and clock.calls == 4  # prefetching is not an environment call
    broker = GenerationBroker()
    broker._generate(lambda prompts: (time.sleep(0.03) or [[1]], None), [type("P", (), {"prompt_ids": [1]})()])
    rollout_s = time.perf_counter() - started
    split = time_split(rollout_s, broker, clock)
    # the calls overlap, so their union is shorter than their sum (by how much depends on the machine's load)
    assert 0.045 <= split["env_s"] < split["env_call_s"] and split["env_call_s"] >= 0.19 and split["env_calls"] == 4
    assert split["generation_s"] >= 0.03
    assert split["generation_s"] + split["env_s"] + split["waiting_s"] == pytest.approx(rollout_s, abs=1e-3)


def test_summary_line_gives_the_environment_share():
    from awm_rl.training.metrics import aggregate, format_time_split, time_summary

    records = [{"step_s": 10.0, "generation_s": 6.0, "env_s": 1.0, "env_busy_s": 3.0, "waiting_s": 0.5,
                "judge_s": 0.5, "logps_s": 0.5, "train_s": 1.5}] * 2
    t = time_summary(records)
    assert t["env_share"] == 0.1 and t["env_busy_share"] == 0.3 and t["generation_share"] == 0.6
    line = format_time_split(t)
    assert line.startswith("environments take 10.0% of a step") and "generation 6.00s (60%)" in line
    assert aggregate("policy_ratio/min", [0.9, 0.8]) == 0.8 and aggregate("policy_ratio/max", [1.1, 1.3]) == 1.3
    assert aggregate("loss", [1.0, 3.0]) == 2.0
