"""The catalog as TRL's environment_factory: the stock `trl.GRPOTrainer` trains a tiny model on a demo environment
through the pool, group members start alike, rewards are the verifiers' verdicts."""

from __future__ import annotations

import inspect
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

SCENARIO = "issue_tracker"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store_root(demo_pristine, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trl_env_store")
    shutil.copytree(demo_pristine, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def pool(store_root, ray_address):
    from awm_rl.runtime.pool import EnvironmentPool

    with EnvironmentPool(store_root, ray_address=ray_address, num_hosts=1, prefetch=4) as p:
        yield p


def _environments(store_root, pool, **kw):
    from awm_rl.integrations.trl_env import AWMEnvironments

    return AWMEnvironments(store_root, scenarios=[SCENARIO], pool=pool, **kw)


def test_tools_are_the_listing_with_its_schemas(store_root, pool):
    from transformers.utils import get_json_schema

    with _environments(store_root, pool, num_generations=2) as envs:
        env = envs()
        listing = {t["name"]: t for t in pool.list_tools(env._handle)}
        members = [name for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
                   if name not in ("reset", "get_reward") and not name.startswith("_")]  # what TRL offers
        assert sorted(members) == sorted(listing)
        for name in members:
            rendered = get_json_schema(getattr(env, name))["function"]
            schema = listing[name]["input_schema"]
            assert set(rendered["parameters"]["properties"]) == set(schema.get("properties") or {}), name
            assert set(rendered["parameters"].get("required", [])) == set(schema.get("required") or []), name


def test_reference_solution_through_the_methods_scores_one_and_doing_nothing_zero(store_root, pool):
    """A write task's reference calls, made as TRL makes them (method(**arguments)), are Completed by its verifier;
    the same task untouched is not."""
    solution = json.loads((ROOT / "seeds" / "solutions" / f"{SCENARIO}.json").read_text())
    task = next(t for t in solution["tasks"] if t["task_idx"] == 1)
    with _environments(store_root, pool, num_generations=1) as envs:
        solved, idle = envs(), envs()
        assert solved.reset(task_idx=1) == idle.reset(task_idx=1) == envs.catalog.task(SCENARIO, 1).task
        for call in task["calls"]:
            answer = getattr(solved, call["tool"])(**call["arguments"])
            assert isinstance(answer, str) and answer
        assert solved.get_reward() == 1.0 and idle.get_reward() == 0.0
        by_slot = {e.slot: e for e in envs.episodes}
        assert by_slot[solved._slot].classification == "Completed" and by_slot[solved._slot].verifier["verdict"] == "complete"
        assert by_slot[idle._slot].classification == "Agent Error" and by_slot[idle._slot].tool_calls == 0
        solved.reset(task_idx=1)  # back to the initial database: the issue it created is gone
        assert solved.get_reward() == 0.0


def test_stock_grpo_trainer_two_steps_on_catalog_environments(store_root, pool, tmp_path):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from awm_rl.agent.tiny_model import build_tiny_qwen3, tiny_model_folder
    from awm_rl.reward import CLASS_REWARD

    G, per_step = 2, 4
    with _environments(store_root, pool, num_generations=G, seed=1) as envs:
        # a tokenizer fitted to the prompts (the tool schemas, the tasks): 15 times shorter prompts on CPU
        texts = [json.dumps(envs.tool_schemas())] + [r.task for r in envs.catalog.all_tasks()]
        build_tiny_qwen3(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, num_generations=G,
                          per_device_train_batch_size=per_step, max_completion_length=12, max_steps=2,
                          max_tool_calling_iterations=1, logging_steps=1, report_to="none", save_strategy="no",
                          model_init_kwargs={"dtype": "float32"}, seed=0)
        model = tiny_model_folder(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        trainer = GRPOTrainer(model=str(model), args=args, environment_factory=envs)
        trainer.train()

        episodes = envs.episodes
        assert len(episodes) == 2 * per_step  # every slot of both steps scored through get_reward
        for ep in episodes:  # each reward is the verifier's verdict under the paper's classes
            assert ep.verifier is not None and ep.verifier["ok"], ep
            assert ep.reward == CLASS_REWARD[ep.classification]
        groups = defaultdict(list)
        for ep in episodes:
            groups[(ep.round, ep.group)].append(ep)
        assert len(groups) == 2 * per_step // G and all(len(members) == G for members in groups.values())
        for members in groups.values():  # every member of a group: the same task, the same initial database
            assert len({(m.task_idx, m.initial_db_sha256) for m in members}) == 1, members
        assert len({ep.task_idx for ep in episodes}) > 1  # groups got different tasks
        logged = [row[f"rewards/AWM_{SCENARIO}/mean"] for row in trainer.state.log_history
                  if f"rewards/AWM_{SCENARIO}/mean" in row]
        assert len(logged) == 2  # TRL logged the environment's reward source on both steps


def test_stock_trainer_routes_rows_to_several_environments(store_root, pool, tmp_path):
    """Several environments (each its own tools): TRL's dict factory and the catalog's task rows; each group runs
    the row's task on the row's environment."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from awm_rl.agent.tiny_model import build_tiny_qwen3, tiny_model_folder
    from awm_rl.integrations.catalog import IntegrationError
    from awm_rl.integrations.trl_env import AWMEnvironments

    scenarios = [SCENARIO, "restaurant_reservations"]
    with AWMEnvironments(store_root, scenarios=scenarios, pool=pool, num_generations=2) as envs:
        rows = envs.dataset()
        assert set(rows.column_names) == {"environment", "task_idx"} and set(rows["environment"]) == set(scenarios)
        texts = [json.dumps(envs.tool_schemas(s)) for s in scenarios] + [r.task for r in envs.catalog.all_tasks()]
        build_tiny_qwen3(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, num_generations=2,
                          per_device_train_batch_size=8, max_completion_length=8, max_steps=1,
                          max_tool_calling_iterations=1, logging_steps=1, report_to="none", save_strategy="no",
                          model_init_kwargs={"dtype": "float32"}, seed=3)
        model = tiny_model_folder(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        trainer = GRPOTrainer(model=str(model), args=args, environment_factory=envs.factories, train_dataset=rows)
        trainer.train()
        episodes = envs.episodes
        assert len(episodes) == 8 and all(ep.verifier is not None for ep in episodes)
        groups = defaultdict(list)
        for ep in episodes:
            groups[(ep.scenario, ep.round, ep.group)].append(ep)
        assert all(len(m) == 2 and len({(e.task_idx, e.initial_db_sha256) for e in m}) == 1 for m in groups.values())
        with pytest.raises(IntegrationError, match="2 environments selected"):
            envs()  # one callable cannot serve two tool listings


def test_final_answers_reach_the_verifier_through_reward_func(store_root, pool, tmp_path):
    """`get_reward()` cannot see the model's last message; with final_answers=True, `reward_func` passes it to the
    verifier: a question task (0) answered as its reference solution answers it scores 1, unanswered 0; the stock
    trainer takes it as its reward function."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    from awm_rl.agent.tiny_model import build_tiny_qwen3, tiny_model_folder
    from awm_rl.integrations.catalog import IntegrationError

    solution = json.loads((ROOT / "seeds" / "solutions" / f"{SCENARIO}.json").read_text())
    task = next(t for t in solution["tasks"] if t["task_idx"] == 0)
    with _environments(store_root, pool, num_generations=1, final_answers=True) as envs:
        answered, silent = envs(), envs()
        assert not hasattr(answered, "get_reward")  # TRL's reward source is the function, not the slots
        for env in (answered, silent):
            env.reset(task_idx=0)
            for call in task["calls"]:
                getattr(env, call["tool"])(**call["arguments"])
        completions = [[{"role": "assistant", "content": task["final_answer"]}], [{"role": "assistant", "content": ""}]]
        assert envs.reward_func(completions, environments=[answered, silent]) == [1.0, 0.0]
        with pytest.raises(IntegrationError, match="environments"):
            envs.reward_func(completions)

    with _environments(store_root, pool, num_generations=2, final_answers=True) as envs:
        texts = [json.dumps(envs.tool_schemas())] + [r.task for r in envs.catalog.all_tasks()]
        build_tiny_qwen3(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, num_generations=2,
                          per_device_train_batch_size=4, max_completion_length=8, max_steps=1,
                          max_tool_calling_iterations=1, logging_steps=1, report_to="none", save_strategy="no",
                          model_init_kwargs={"dtype": "float32"}, seed=0)
        model = tiny_model_folder(tmp_path, vocab_size=4096, extra_texts=texts, merge_across_words=True)
        GRPOTrainer(model=str(model), args=args, environment_factory=envs, reward_funcs=[envs.reward_func]).train()
        assert len(envs.episodes) == 4 and all(ep.verifier is not None for ep in envs.episodes)


def test_a_kept_catalog_version_is_used_only_while_its_environments_are_unchanged(demo_pristine, tmp_path):
    """`catalog_version=` trains on exactly a kept catalog (as `awm train --catalog-version`): its tasks while every
    environment is as it recorded, a clear error naming the changed one after."""
    from awm_resources.provenance import list_catalog_versions
    from awm_rl.integrations.catalog import IntegrationError, catalog_tasks

    root = tmp_path / "store"
    shutil.copytree(demo_pristine, root)
    current = catalog_tasks(root, scenarios=[SCENARIO])
    digest = next(d for d in list_catalog_versions(current.store) if d == current.catalog_digest)
    kept = catalog_tasks(root, catalog_version=digest[:8], scenarios=[SCENARIO])
    assert [r.task_idx for r in kept.tasks[SCENARIO]] == [r.task_idx for r in current.tasks[SCENARIO]]
    assert kept.catalog_path.name == f"{digest}.json"
    tasks_file = root / "scenarios" / SCENARIO / "tasks.json"
    tasks_file.write_text(tasks_file.read_text().replace("pulse-api", "pulse-apx", 1))
    with pytest.raises(IntegrationError, match=f"{SCENARIO}: "):
        catalog_tasks(root, catalog_version=digest, scenarios=[SCENARIO])


def test_a_listing_entry_becomes_the_schema_transformers_renders():
    """Types, enums, optional (nullable) and required arguments survive the trip through a method's signature and
    docstring; an argument no method can take is a clear error naming the tool."""
    from transformers.utils import get_json_schema

    from awm_rl.integrations.catalog import IntegrationError
    from awm_rl.integrations.trl_env import tool_method

    tool = {"name": "search_items", "description": "Find items.", "input_schema": {
        "type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "Words to match"},
            "status": {"type": "string", "enum": ["open", "closed"], "description": "Only these"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "At most"}}}}
    rendered = get_json_schema(tool_method(tool))["function"]
    props = rendered["parameters"]["properties"]
    assert rendered["name"] == "search_items" and rendered["description"] == "Find items."
    assert rendered["parameters"]["required"] == ["query"] and props["query"]["type"] == "string"
    assert props["status"]["enum"] == ["open", "closed"] and props["status"].get("nullable")
    assert props["tags"]["items"] == {"type": "string"} and props["limit"]["type"] == "integer"
    for bad in ("from", "self", "item-id"):
        with pytest.raises(IntegrationError, match=f"search_items.*{bad}"):
            tool_method({**tool, "input_schema": {"properties": {bad: {"type": "string"}}}})
