"""Per-task difficulty records (awm_resources.difficulty): counting, buckets, parts written once and merged on
read, concurrent writers losing nothing, unreadable parts reported by path."""

from __future__ import annotations

import multiprocessing

import pytest

from awm_resources.difficulty import (
    BUCKETS,
    bucket_counts,
    bucket_of,
    load_difficulty,
    new_run_id,
    record_rollouts,
    tally,
)
from awm_resources.store import ArtifactStore


def test_tally_counts_outcomes_and_keeps_policy_failures_out_of_attempts():
    rows = [("shop", 0, "completed", 3), ("shop", 0, "format_error", 1), ("shop", 0, "policy_failure", 7),
            ("shop", 1, "partially_completed", 5), ("shop", 1, "environment_error", 2), ("shop", 1, "agent_error", 4)]
    first, second = tally(rows)
    assert (first.scenario, first.task_idx, first.attempts, first.completed, first.format_errors) == ("shop", 0, 2, 1, 1)
    assert first.policy_failures == 1 and first.turns == 4  # the failed rollout's turns are not an attempt's
    assert (second.partial, second.environment_errors, second.agent_errors, second.attempts, second.turns) == (1, 1, 1, 3, 11)
    with pytest.raises(ValueError, match="shop/2: unknown outcome 'solved'"):
        tally([("shop", 2, "solved", 1)])


@pytest.mark.parametrize("rate, attempts, bucket", [
    (None, 0, "untried"), (0.0, 5, "unsolved"), (0.19, 100, "hard"), (0.2, 5, "medium"), (0.8, 5, "medium"),
    (0.81, 100, "easy"), (1.0, 1, "easy")])
def test_buckets_by_pass_rate(rate, attempts, bucket):
    assert bucket_of(rate, attempts) == bucket
    assert bucket in BUCKETS


def _write_parts(root: str, worker: int, parts: int) -> None:
    store = ArtifactStore(root)
    for i in range(parts):
        record_rollouts(store, run="train-shared", source="training", policy="grpo:x", step=i + 1,
                        part=f"step_{i + 1:04d}-w{worker}", rows=[("shop", worker % 2, "completed", 2),
                                                                  ("shop", 2, "format_error", 1)])


def test_concurrent_writers_lose_nothing_and_reads_merge(tmp_path):
    workers, parts = 4, 6
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_parts, args=(str(tmp_path), w, parts)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    store = ArtifactStore(tmp_path)
    record_rollouts(store, run=new_run_id("evaluation"), source="evaluation", policy="reference",
                    part="episodes", rows=[("shop", 0, "completed", 4), ("shop", 1, "agent_error", 6)])
    index = load_difficulty(store)
    assert index.problems == [] and len(index.parts) == workers * parts + 1
    merged = index.tasks()
    assert merged[("shop", 0)].attempts == 2 * parts + 1 and merged[("shop", 0)].pass_rate == 1.0
    assert merged[("shop", 2)].attempts == workers * parts and merged[("shop", 2)].bucket == "unsolved"
    assert merged[("shop", 1)].policies == {"grpo:x", "reference"}
    training = index.tasks(policy="grpo:x")
    assert training[("shop", 1)].completed == 2 * parts and training[("shop", 1)].bucket == "easy"
    assert index.tasks(source="evaluation")[("shop", 1)].bucket == "unsolved"
    steps = index.by_step("train-shared")
    assert list(steps) == list(range(1, parts + 1)) and steps[1][("shop", 2)].attempts == workers
    assert bucket_counts(merged.values()) == {"untried": 0, "unsolved": 1, "hard": 0, "medium": 0, "easy": 2}
    assert merged[("shop", 0)].row()["mean_turns"] == pytest.approx((2 * 2 * parts + 4) / (2 * parts + 1), abs=0.01)


def test_parts_are_written_once_and_bad_ones_are_reported(tmp_path):
    store = ArtifactStore(tmp_path)
    rows = [("shop", 0, "completed", 1)]
    record_rollouts(store, run="eval-1", source="evaluation", policy="p", part="episodes", rows=rows)
    with pytest.raises(FileExistsError, match="written once"):
        record_rollouts(store, run="eval-1", source="evaluation", policy="p", part="episodes", rows=rows)
    with pytest.raises(ValueError, match="run '../x'"):
        record_rollouts(store, run="../x", source="evaluation", policy="p", part="episodes", rows=rows)
    with pytest.raises(ValueError, match="source"):
        record_rollouts(store, run="eval-2", source="bench", policy="p", part="episodes", rows=rows)
    assert record_rollouts(store, run="eval-3", source="evaluation", policy="p", part="episodes", rows=[]) is None
    broken = store.difficulty_dir / "eval-9" / "episodes.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"run": "eval-9", "tasks": "many"}')
    index = load_difficulty(store)
    assert len(index.parts) == 1 and index.tasks()[("shop", 0)].completed == 1
    [problem] = index.problems
    assert str(broken) in problem and "DifficultyPart" in problem


def test_the_catalog_shows_each_task_by_the_policy_recorded_last_never_pooled(tmp_path):
    """A new policy's evaluation of a task is shown with its own counts, not averaged with an older policy's
    (the older one is named beside it with its own rate); every policy has its totals."""
    import dagster as dg

    from awm_assets.defs.catalog.catalog_asset import _task_difficulty
    from awm_resources.difficulty import DifficultyIndex, latest_policy_view, policy_summary
    from awm_resources.documents import DifficultyPart

    def part(policy: str, at: float, rows: list) -> DifficultyPart:
        return DifficultyPart(run=policy.replace(":", "-") + "-run", source="evaluation", policy=policy, written_at=at,
                              tasks=tally(rows))

    old = part("reference", 100.0, [("shop", 0, "completed", 2)] * 10 + [("shop", 1, "completed", 2)] * 10)
    new = part("grpo:x", 200.0, [("shop", 0, "agent_error", 5)] * 4)
    index = DifficultyIndex([new, old])  # file order does not decide which is newer
    keys = [("shop", 0), ("shop", 1), ("shop", 2)]
    assert index.tasks()[("shop", 0)].bucket == "medium"  # pooled: 10 of 14, what the catalog no longer shows
    zero, one, two = latest_policy_view(index, keys)
    assert (zero["policy"], zero["bucket"], zero["pass_rate"], zero["attempts"]) == ("grpo:x", "unsolved", 0.0, 4)
    assert zero["other_policies"] == "reference 1.00 of 10" and zero["mean_turns"] == 5.0
    assert (one["policy"], one["bucket"], one["other_policies"]) == ("reference", "easy", "")
    assert (two["policy"], two["bucket"], two["attempts"]) == ("", "untried", 0)
    newest, oldest = policy_summary(index, keys)
    assert (newest["policy"], newest["tasks"], newest["attempts"], newest["pass_rate"], newest["unsolved"]) == \
        ("grpo:x", 1, 4, 0.0, 1)
    assert (oldest["policy"], oldest["tasks"], oldest["pass_rate"], oldest["easy"]) == ("reference", 2, 1.0, 2)
    assert newest["last_recorded"] == "1970-01-01T00:03:20Z"

    store = ArtifactStore(tmp_path)
    for doc, name in ((old, "episodes"), (new, "episodes")):
        store.write_difficulty(doc, name)
    meta = _task_difficulty(dg.build_asset_context(), store, [{"name": "shop", "tasks": 3, "excluded_tasks": [2]}])
    table = [r.data for r in meta["task_difficulty"].value.records]
    assert [(r["task"], r["policy"], r["bucket"]) for r in table] == [(0, "grpo:x", "unsolved"), (1, "reference", "easy")]
    buckets = {r.data["bucket"]: r.data["tasks"] for r in meta["difficulty_buckets"].value.records}
    assert buckets["unsolved"] == 1 and buckets["easy"] == 1 and buckets["medium"] == 0
    assert [r.data["policy"] for r in meta["difficulty_by_policy"].value.records] == ["grpo:x", "reference"]
