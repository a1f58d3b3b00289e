"""The training curriculum (awm_rl.training.curriculum): the pass-rate band sampler, dynamic sampling with
refills, retirement, the config section; and a short real curriculum run on the demo (tiny model, CPU)
whose logged choices are checked against the difficulty records it started from and wrote."""

from __future__ import annotations

import json
import shutil

import pytest

from awm_resources.difficulty import TaskDifficulty
from awm_rl.agent.episode import EpisodeScore
from awm_rl.reward import TaskRecord
from awm_rl.training.config import CurriculumConfig, config_from_dict
from awm_rl.training.curriculum import Curriculum, band_counts, step_row, task_row
from awm_rl.training.rollouts import GenerationBroker, ScoredRound

G = 2
REWARD = {"completed": 1.0, "partially_completed": 0.1, "agent_error": 0.0, "format_error": -1.0}


def _tasks(n: int) -> list[TaskRecord]:
    return [TaskRecord("shop", i, f"task {i}") for i in range(n)]


def _prior(**rates: tuple[int, int]) -> dict[tuple[str, int], TaskDifficulty]:
    """t<i>=(completed, attempts) -> prior records."""
    return {("shop", int(k[1:])): TaskDifficulty(scenario="shop", task_idx=int(k[1:]), attempts=a, completed=c)
            for k, (c, a) in rates.items()}


def _round(rows: list[dict], outcomes: dict[int, list[str]]) -> ScoredRound:
    """A judged round: each task's G rollouts get the outcomes listed for it (a fake `run` for control flow)."""
    scores, seen = [], {}
    for row in rows:
        i = seen[row["task_idx"]] = seen.get(row["task_idx"], -1) + 1
        outcome = outcomes[row["task_idx"]][i % len(outcomes[row["task_idx"]])]
        scores.append(EpisodeScore(outcome=outcome, reward=REWARD[outcome], step_rewards=[REWARD[outcome]], reasons=""))
    return ScoredRound(rows, [None] * len(rows), scores, [False] * len(rows), 1.0, 0.5,
                       {"generation_s": 0.4, "env_s": 0.3, "waiting_s": 0.3, "env_busy_s": 0.5, "env_calls": 3,
                        "env_call_s": 0.5}, GenerationBroker())


def _curriculum(n_tasks=6, per_step=2, steps=3, prior=None, **config) -> tuple[Curriculum, list]:
    schedule: list = [[] for _ in range(steps)]
    cur = Curriculum(CurriculumConfig(enabled=True, **config), _tasks(n_tasks), schedule, group_size=G,
                     tasks_per_step=per_step, seed=0, prior=prior)
    return cur, schedule


def test_sampler_prefers_the_band_and_untried_tasks():
    # t0 always passes, t1 never, t2 and t3 in the band, t4 and t5 never tried
    prior = _prior(t0=(10, 10), t1=(0, 10), t2=(5, 10), t3=(3, 10))
    cur, schedule = _curriculum(prior=prior, per_step=4, out_of_band_weight=0.0)
    assert {t.task_idx for t in schedule[0]} == {2, 3, 4, 5}
    assert {c["why"].split(" (")[0] for c in cur._planned[1]} == {"in band", "untried"}
    # more slots than tasks in the band: the others come after them, never in place of them
    assert sorted(t.task_idx for t in cur.choose(6)) == [0, 1, 2, 3, 4, 5]
    picks = cur.choose(7)  # a task repeats only beyond the active tasks
    assert len(picks) == 7 and len({t.task_idx for t in picks}) == 6
    # with weight 0.1 the out-of-band tasks are drawn now and then (over many draws), the band most of the time
    cur, _ = _curriculum(prior=prior, per_step=1, out_of_band_weight=0.1)
    picks = [cur.choose(1)[0].task_idx for _ in range(400)]
    outside = sum(p in (0, 1) for p in picks) / len(picks)
    assert 0.0 < outside < 0.15
    assert rows_per_task(cur.rows_for(1)) == [G]


def rows_per_task(rows: list[dict]) -> list[int]:
    counts: dict = {}
    for row in rows:
        counts[row["task_idx"]] = counts.get(row["task_idx"], 0) + 1
    return list(counts.values())


def test_groups_without_variance_are_refilled_up_to_the_bounds():
    cur, schedule = _curriculum(n_tasks=6, per_step=3, max_refill_rounds=2, max_refill_groups=2)
    step_tasks = [t.task_idx for t in schedule[0]]
    first = [task_row(t) for t in schedule[0] for _ in range(G)]
    # first group varies; the other two are all format errors (no gradient)
    outcomes = {i: ["format_error"] for i in range(6)}
    outcomes[step_tasks[0]] = ["completed", "agent_error"]
    runs: list[list[int]] = []

    def run(rows):
        runs.append(sorted({r["task_idx"] for r in rows}))
        return _round(rows, {i: ["completed", "format_error"] if i == sorted({r["task_idx"] for r in rows})[0]
                             else ["agent_error"] for i in range(6)})

    done = cur.fill_step(1, _round(first, outcomes), run)
    log = done.curriculum
    assert log["dropped_groups"] == [f"shop/{i}" for i in step_tasks[1:]]
    # round 1 refills both slots with tasks not in the step; one varies and is kept; round 2 would exceed the
    # bound of 2 refill groups
    assert len(runs) == 1 and not set(runs[0]) & set(step_tasks)
    assert log["refill_rounds"] == 1 and len(log["refill_groups"]) == 2 and log["refills_kept"] == 1
    assert log["groups_without_variance"] == 1
    assert done.train == [True] * G + [True] * G + [False] * G  # the slot still without variance: no samples
    assert len(done.rows) == len(done.scores) == 3 * G and len(done.rounds) == 2
    assert done.rollout_s == 2.0 and done.split["env_calls"] == 6 and done.split["generation_s"] == pytest.approx(0.8)
    assert [t.task_idx for t in schedule[1]] == [int(n.split("/")[1]) for n in log["next"]]
    metrics = cur.metrics(log)
    assert metrics["curriculum_dropped_groups"] == 2 and metrics["curriculum_refill_groups"] == 2
    assert metrics["curriculum_chosen_untried"] == 3 and metrics["curriculum_chosen_in_band"] == 0
    assert "2 group(s) without reward variance dropped, 2 refilled in 1 round(s) (1 kept)" in cur.message(log)
    # the step as the asset's table row, and the run's totals in the summary
    row = step_row(log)
    assert (row["chosen_untried"], row["dropped_groups"], row["refill_groups"], row["refills_kept"]) == (3, 2, 2, 1)
    assert row["dropped"] == ", ".join(log["dropped_groups"]) and row["groups_without_variance"] == 1
    totals = cur.summary()["totals"]
    assert totals["chosen"] == 3 and totals["dropped_groups"] == 2 and totals["refills_kept"] == 1
    with pytest.raises(ValueError, match="names no band"):
        band_counts([{"task": "shop/0", "why": "lucky"}])


def test_dynamic_sampling_off_trains_on_every_group_and_runs_nothing_more():
    cur, schedule = _curriculum(dynamic_sampling=False)
    first = [task_row(t) for t in schedule[0] for _ in range(G)]
    done = cur.fill_step(1, _round(first, {i: ["format_error"] for i in range(6)}),
                         lambda rows: pytest.fail("no refill without dynamic sampling"))
    assert all(done.train) and done.curriculum["refill_rounds"] == 0
    assert done.curriculum["groups_without_variance"] == 2


def test_tasks_solved_n_times_in_a_row_retire():
    cur, schedule = _curriculum(n_tasks=3, per_step=3, retire_after=3, max_refill_rounds=0, steps=4)
    seen = []
    for step in (1, 2, 3):
        rows = cur.rows_for(step)
        seen.append({r["task_idx"] for r in rows})
        # task 0 always completed; task 1 alternates (streak broken); task 2 never
        done = cur.fill_step(step, _round(rows, {0: ["completed"], 1: ["completed", "agent_error"], 2: ["agent_error"]}),
                             lambda rows: pytest.fail("no refill rounds"))
        if 0 in seen[-1] and cur.streak[("shop", 0)] >= 3:
            break
    assert "shop/0" in done.curriculum["retired"] and cur.retired[("shop", 0)] == step
    assert all(t.task_idx != 0 for t in schedule[step])  # never chosen again
    assert cur.summary()["retired"] == {"shop/0": step}
    assert cur.summary()["pass_rates"]["shop/0"] == 1.0
    # every task retired: training goes on with them (logged as such) rather than with nothing
    cur.retired.update({("shop", 1): step, ("shop", 2): step})
    cur.choose(2)
    assert all("every task retired" in c["why"] for c in cur.last_choice)


def test_config_section():
    base = {"model": {"tiny": True}}
    assert config_from_dict(base).curriculum.enabled is False  # off unless asked for
    cfg = config_from_dict({**base, "curriculum": {"enabled": True, "band": [0.3, 0.7], "retire_after": None}})
    assert cfg.curriculum.band == (0.3, 0.7) and cfg.curriculum.retire_after is None
    with pytest.raises(ValueError, match="curriculum.band"):
        config_from_dict({**base, "curriculum": {"band": [0.8, 0.2]}})
    with pytest.raises(ValueError, match="curriculum needs one trainer process"):
        config_from_dict({**base, "curriculum": {"enabled": True}, "ray": {"trainer_workers": 2},
                          "grpo": {"group_size": 2, "tasks_per_step": 2, "mini_batch_tasks": 2}})
    with pytest.raises(ValueError, match="curriculum.bandwidth"):
        config_from_dict({**base, "curriculum": {"bandwidth": 1}})


@pytest.mark.slow
def test_a_curriculum_run_on_the_demo_logs_its_choices(demo_pristine, tmp_path):
    """Two real GRPO steps (untrained tiny model, code judge, Ray pool) with the curriculum on: the first step's
    tasks come from the band of the records the run started from, every group (all format errors: no reward
    variance) is dropped and refilled once, and every rollout lands in the difficulty records by step."""
    from awm_resources.difficulty import load_difficulty, record_rollouts
    from awm_resources.store import ArtifactStore
    from awm_rl.training.job import run_training

    root = tmp_path / "store"
    shutil.copytree(demo_pristine, root)
    store = ArtifactStore(root)
    # an evaluation found music_playlists/0 always solved: outside the band, so never chosen (weight 0)
    record_rollouts(store, run="evaluation-earlier", source="evaluation", policy="reference", part="episodes",
                    rows=[("music_playlists", 0, "completed", 3)] * 10)
    events: list[dict] = []
    config = config_from_dict({
        "name": "curriculum-test", "output_dir": str(tmp_path / "run"), "model": {"tiny": True},
        "environments": {"store_root": str(root), "scenarios": ["music_playlists"], "max_tasks_per_scenario": 3,
                         "env_hosts": 1},
        "grpo": {"steps": 2, "group_size": 2, "tasks_per_step": 2, "mini_batch_tasks": 2, "beta": 0.0, "save_every": 100},
        "rollout": {"max_turns": 2, "max_response_tokens": 12, "max_context_tokens": 8192, "tool_listing": "compact"},
        "generation": {"backend": "transformers"}, "tensorboard": False,
        "curriculum": {"enabled": True, "out_of_band_weight": 0.0, "max_refill_rounds": 1}})
    summary = run_training(config, on_event=events.append)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        log = r["curriculum"]
        assert log["step"] == r["step"] and len(log["chosen"]) == 2
        # an untrained model breaks the format: no group has reward variance, all are dropped and refilled once
        assert len(log["dropped_groups"]) == 2 and log["refill_rounds"] == 1 and len(log["refill_groups"]) == 2
        assert log["groups_without_variance"] == 2 and r["samples"] == 0 and r["curriculum_dropped_groups"] == 2
    first = records[0]["curriculum"]
    # step 1: the two untried tasks (in the band), not the always-solved one
    assert sorted(c["task"] for c in first["chosen"]) == ["music_playlists/1", "music_playlists/2"]
    assert all(c["why"] == "untried" for c in first["chosen"])
    # they failed every rollout (pass rate 0: outside the band now too); the refill takes the task not yet in the
    # step first, then one of the step's own
    refill = first["refill_groups"]
    assert refill[0]["task"] == "music_playlists/0" and refill[0]["why"] == "outside band (pass rate 1.00 of 10)"
    assert refill[1]["task"] in {"music_playlists/1", "music_playlists/2"}
    assert refill[1]["why"] == "outside band (pass rate 0.00 of 2)" and refill[1]["round"] == 1
    assert [c["task"] for c in records[1]["curriculum"]["chosen"]] == first["next"]
    assert any(e["message"].startswith("curriculum step 2:") for e in events)
    # every rollout run (4 scheduled + 4 refill per step) is in the store's records, by step, under this run
    index = load_difficulty(store)
    steps = index.by_step(summary["difficulty_run"])
    assert list(steps) == [1, 2]
    assert all(sum(t.attempts + t.policy_failures for t in per_task.values()) == 8 for per_task in steps.values())
    # the final pass rate of music_playlists/0: the prior's 10 completions over its 10 + this run's failed attempts
    tried = sum(per_task[("music_playlists", 0)].attempts for per_task in steps.values() if ("music_playlists", 0) in per_task)
    assert tried >= 2 and summary["curriculum"]["steps"] == 2
    assert summary["curriculum"]["pass_rates"]["music_playlists/0"] == round(10 / (10 + tried), 4)
    # What the UI shows of it: the grpo_training asset's observation per step and its curriculum metadata
    from awm_assets.defs.training.training_asset import curriculum_metadata, step_observation

    seen = step_observation(records[0])
    assert seen["step"] == 1 and seen["curriculum_dropped_groups"] == 2 and seen["curriculum_refill_groups"] == 2
    assert seen["curriculum_chosen_untried"] == 2 and seen["curriculum_chosen_outside_band"] == 0
    assert summary["curriculum"]["totals"]["dropped_groups"] == 4 and summary["curriculum"]["totals"]["refill_groups"] == 4
    meta = curriculum_metadata(summary["curriculum"], records)
    rows = [r.data for r in meta["curriculum_per_step"].value.records]
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["chosen_untried"] == 2 and rows[0]["dropped_groups"] == 2
    assert rows[0]["tasks"] == ", ".join(c["task"] for c in first["chosen"]) and rows[1]["refill_groups"] == 2
    totals = {r.data["metric"]: r.data["value"] if r.data["text"] == "" else r.data["text"]
              for r in meta["curriculum_totals"].value.records}
    assert totals["dropped_groups"] == 4 and totals["band"] == "0.2-0.8" and totals["retired_tasks"] == 0
    tasks = {r.data["task"]: r.data["pass_rate"] for r in meta["curriculum_tasks"].value.records}
    assert tasks == summary["curriculum"]["pass_rates"]
    assert curriculum_metadata(None, records) == {}
