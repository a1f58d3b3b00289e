"""The catalog as TRL's `environment_factory` for the stock `trl.GRPOTrainer` (TRL 1.16).

TRL's contract (read from `trl/trainer/grpo_trainer.py`): the trainer calls the factory once per rollout slot
and reuses the objects; before each generation it calls `reset(**row)` on every slot (the dataset row, prompt
included) and appends the string it returns to the last user message; the public methods of the object's class
are the tools, their JSON schemas rendered from type hints and a Google docstring; `get_reward()` (no argument) is
a reward source named after the class. The sampler repeats each row `num_generations` times in consecutive slots.

What this module adds: each slot is an instance of the environment pool (sandboxed, reset in about a
millisecond); the environment owns its tasks: the prompt is the task text `reset()` returns, chosen from the
catalog's trainable tasks; every member of a group (the `num_generations` consecutive slots, or the rows TRL
repeats when a dataset names the task) gets the same task and the scenario's initial database; the tools are the
environment's own listing, each a method with its schema; the reward is this project's judge over the episode's
database snapshots (the paper's 1 / 0.1 / 0 classes; 0 when the environment failed), judged for all slots of a
round in one verifier batch. `get_reward()` never sees the model's last message; with `final_answers=True` the
slots have no `get_reward` and `reward_funcs=[envs.reward_func]` scores with it (question tasks need it).
`AWMEnvironments.episodes` records what every episode was scored and why.

TRL user's lines (one environment; several: `environment_factory=envs.factories, train_dataset=envs.dataset()`)::

    envs = AWMEnvironments(scenarios=["issue_tracker"], num_generations=8)
    trainer = GRPOTrainer(model=..., args=GRPOConfig(num_generations=8, max_steps=100, ...),
                          environment_factory=envs)
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import keyword
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from awm_rl.integrations.catalog import CatalogTasks, IntegrationError, catalog_tasks
from awm_rl.reward.tasks import TaskRecord

RESERVED = ("reset", "get_reward")  # TRL's own method names: never tools
_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


@dataclass
class EpisodeRecord:
    """One slot's episode: which task, from which state, what the environment answered, how it was scored."""

    slot: int
    group: int
    round: int
    scenario: str
    task_idx: int
    tool_calls: int = 0
    environment_error: str | None = None
    initial_db_sha256: str | None = None
    reward: float | None = None
    outcome: str | None = None
    classification: str | None = None
    verifier: dict[str, Any] | None = field(default=None, repr=False)
    reasons: str = ""


def _hint(schema: dict[str, Any]) -> Any:
    """The Python type whose JSON schema (as transformers renders it) is closest to `schema`."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None:
        for key in ("anyOf", "oneOf"):
            options = [o for o in schema.get(key) or [] if isinstance(o, dict) and o.get("type") != "null"]
            if len(options) == 1:
                return _hint(options[0])
        return str  # a schema without one type: the environment validates what arrives
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items)] if isinstance(items, dict) else list  # type: ignore[misc]
    return _JSON_TYPES.get(kind, str)


def _describe(name: str, schema: dict[str, Any]) -> str:
    text = " ".join(str(schema.get("description") or schema.get("title") or name).split())
    if isinstance(schema.get("enum"), list):
        text += f" (choices: {json.dumps(schema['enum'])})"
    return text


def tool_method(tool: dict[str, Any]) -> Any:
    """A method calling `tool` on the slot's instance, with the signature and docstring TRL renders as its schema."""
    name = tool["name"]
    schema = tool.get("input_schema") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_lines = []
    for arg, arg_schema in props.items():
        if not arg.isidentifier() or keyword.iskeyword(arg) or arg in ("self", "cls"):
            raise IntegrationError(f"tool {name!r}: argument {arg!r} is not a Python identifier (or is the method's "
                                   "receiver name), so TRL cannot offer it as a method argument")
        hint = _hint(arg_schema if isinstance(arg_schema, dict) else {})
        hint = hint if arg in required else Optional[hint]  # transformers renders Optional as nullable
        annotations[arg] = hint
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=hint,
                                        default=inspect.Parameter.empty if arg in required else None))
        arg_lines.append(f"    {arg}: {_describe(arg, arg_schema if isinstance(arg_schema, dict) else {})}")
    annotations["return"] = str
    description = " ".join(str(tool.get("description") or name).split())

    def call(self: AWMEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    call.__doc__ = (description + ("\n\nArgs:\n" + "\n".join(arg_lines) if arg_lines else "")
                    + "\n\nReturns:\n    The environment's answer (JSON text, or the error).")
    return call


class AWMEnvironment:
    """One rollout slot over a pool instance. Public methods are the tools (one subclass per scenario)."""

    _scenario: str = ""

    def __init__(self, owner: AWMEnvironments, slot: int) -> None:
        self._owner = owner
        self._slot = slot
        self._rounds = 0
        self._handle = owner.pool.acquire(self._scenario)
        self._episode: EpisodeRecord | None = None
        self._task: TaskRecord | None = None
        self._final_answer: str | None = None

    def reset(self, **row: Any) -> str:
        """Back to the scenario's initial database with this round's task; returns the task text (the prompt)."""
        self._rounds += 1
        self._final_answer = None
        self._task = self._owner._task_for(self, row)
        self._owner.pool.reset(self._handle)
        self._episode = EpisodeRecord(slot=self._slot, group=self._slot // self._owner.num_generations,
                                      round=self._rounds, scenario=self._scenario, task_idx=self._task.task_idx)
        return self._task.task

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        if self._episode is None:
            raise IntegrationError(f"tool {tool!r} called on a slot of {self._scenario!r} before reset()")
        result = self._owner.pool.call_tool(self._handle, tool, arguments)
        self._episode.tool_calls += 1
        if result.error_kind == "environment" and self._episode.environment_error is None:
            self._episode.environment_error = result.text[:500]
        return result.text


def _final_answer(completion: Any) -> str | None:
    """The rollout's last assistant message without tool calls (conversational), or the completion text."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if isinstance(message, dict) and message.get("role") == "assistant" and not message.get("tool_calls"):
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


class _OwnsReward:
    """Adds TRL's `get_reward()` (the default); without it, `AWMEnvironments.reward_func` scores with final answers."""

    def get_reward(self) -> float:
        """The judge's reward for this slot's episode (the whole round is judged in one batch)."""
        return self._owner._reward(self)  # type: ignore[attr-defined]  # mixed into AWMEnvironment only


class AWMEnvironments:
    """The factory: catalog tasks, the pool, the judge, and which task each group of slots runs this round."""

    def __init__(self, store_root: Path | str | None = None, *, num_generations: int,
                 catalog_version: str | None = None, scenarios: list[str] | None = None, judge: Any = "code",
                 seed: int = 0, pool: Any | None = None, ray_address: str | None = None,
                 max_tasks_per_scenario: int | None = None, final_answers: bool = False) -> None:
        from awm_rl.reward import Judge

        if num_generations < 1:
            raise IntegrationError(f"num_generations must be at least 1, got {num_generations}")
        self.judge = judge if isinstance(judge, Judge) else Judge(judge)
        self.catalog: CatalogTasks = catalog_tasks(store_root, catalog_version=catalog_version, scenarios=scenarios,
                                                   judge_mode=self.judge.mode,
                                                   max_tasks_per_scenario=max_tasks_per_scenario)
        self.num_generations = num_generations
        self.final_answers = final_answers
        if pool is None:
            from awm_rl.runtime.pool import EnvironmentPool

            pool = EnvironmentPool(self.catalog.store.root, ray_address=ray_address, prefetch=num_generations)
            self._own_pool = True
        else:
            self._own_pool = False
        self.pool = pool
        self.episodes: list[EpisodeRecord] = []  # every scored episode, in scoring order
        self._lock = threading.Lock()
        self._classes: dict[str, type[AWMEnvironment]] = {}
        self._slots: dict[str, itertools.count] = {}
        self._envs: list[AWMEnvironment] = []
        self._assigned: dict[tuple[str, int, int], TaskRecord] = {}
        rng = random.Random(seed)
        self._order = {s: self._cycle(records, rng) for s, records in self.catalog.tasks.items()}

    @staticmethod
    def _cycle(records: list[TaskRecord], rng: random.Random):
        while True:
            epoch = list(records)
            rng.shuffle(epoch)
            yield from epoch

    # -- what TRL calls ------------------------------------------------------------------------------
    def __call__(self) -> AWMEnvironment:
        """A new slot (TRL's single-callable `environment_factory`): needs exactly one environment."""
        if len(self.catalog.scenarios) != 1:
            raise IntegrationError(
                f"{len(self.catalog.scenarios)} environments selected ({', '.join(self.catalog.scenarios)}): each has "
                "its own tools, so pass `environment_factory=envs.factories, train_dataset=envs.dataset()` "
                "(TRL routes each row to its environment), or select one with scenarios=[...]")
        return self.make(self.catalog.scenarios[0])

    @property
    def factories(self) -> dict[str, Any]:
        """Environment name -> factory, for TRL's dict `environment_factory` (with `dataset()`)."""
        return {s: functools.partial(self.make, s) for s in self.catalog.scenarios}

    def dataset(self) -> Any:
        """A `datasets.Dataset` of the trainable tasks: `environment` (TRL routes by it) and `task_idx`; no prompt
        (each slot's `reset()` returns the task text). TRL repeats a row in `num_generations` consecutive slots."""
        from datasets import Dataset

        rows = self.catalog.all_tasks()
        return Dataset.from_dict({"environment": [r.scenario for r in rows], "task_idx": [r.task_idx for r in rows]})

    def tool_schemas(self, scenario: str | None = None) -> list[dict[str, Any]]:
        """The tools as TRL renders them in the prompt (transformers' JSON schemas), without taking a slot."""
        from transformers.utils import get_json_schema

        name = scenario or self.catalog.scenarios[0]
        with self._lock:
            cls = self._classes.get(name) or self._environment_class(name)
        return [get_json_schema(member) for member_name, member in inspect.getmembers(cls, predicate=inspect.isfunction)
                if member_name not in RESERVED and not member_name.startswith("_")]

    def reward_func(self, completions: list[Any], environments: list[AWMEnvironment] | None = None,
                    **_: Any) -> list[float]:
        """TRL reward function (`reward_funcs=[envs.reward_func]`, with `final_answers=True`): the judge's reward,
        the verifier also reading each rollout's final answer (its last assistant message), which `get_reward()`
        cannot see. TRL passes the batch's `environments`."""
        if not self.final_answers:
            raise IntegrationError("reward_func needs AWMEnvironments(final_answers=True): otherwise the slots' "
                                   "get_reward() is TRL's reward source already and the reward would count twice")
        if environments is None or len(environments) != len(completions):
            raise IntegrationError("reward_func needs TRL's `environments` (one per completion): pass "
                                   "`environment_factory` to the same trainer")
        for env, completion in zip(environments, completions, strict=True):
            env._final_answer = _final_answer(completion)
        self._score([e for e in environments if e._episode is not None and e._episode.reward is None])
        return [self._reward(env) for env in environments]

    def make(self, scenario: str) -> AWMEnvironment:
        """A new slot of `scenario` (an instance acquired from the pool)."""
        with self._lock:
            cls = self._classes.get(scenario) or self._environment_class(scenario)
            slot = next(self._slots.setdefault(scenario, itertools.count()))
        env = cls(self, slot)
        with self._lock:
            self._envs.append(env)
        return env

    def close(self) -> None:
        """Release every slot's instance; close the pool if this object made it."""
        for env in self._envs:
            try:
                self.pool.release(env._handle)
            except Exception:  # noqa: BLE001 - a closed pool or lost host has nothing left to release
                pass
        self._envs.clear()
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> AWMEnvironments:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- inside --------------------------------------------------------------------------------------
    def _environment_class(self, scenario: str) -> type[AWMEnvironment]:
        """A subclass whose methods are the scenario's tools (TRL lists them on the class)."""
        probe = self.pool.acquire(scenario)
        try:
            tools = self.pool.list_tools(probe)
        finally:
            self.pool.release(probe)
        members: dict[str, Any] = {"_scenario": scenario, "__doc__": f"The {scenario} environment of the AWM catalog."}
        for tool in tools:
            name = tool["name"]
            if name in RESERVED or name.startswith("_") or hasattr(AWMEnvironment, name):
                raise IntegrationError(f"{scenario}: tool {name!r} clashes with TRL's environment contract "
                                       f"({', '.join(RESERVED)} and private names are not tools)")
            members[name] = tool_method(tool)
        bases = (AWMEnvironment,) if self.final_answers else (AWMEnvironment, _OwnsReward)
        cls = type(f"AWM_{scenario}", bases, members)
        self._classes[scenario] = cls
        return cls

    def _task_for(self, env: AWMEnvironment, row: dict[str, Any]) -> TaskRecord:
        """The row's task when a dataset names it, else the one this round assigns the slot's group."""
        if row.get("task_idx") is not None:
            scenario = row.get("environment") or env._scenario
            if scenario != env._scenario:
                raise IntegrationError(f"a row for environment {scenario!r} reached a slot of {env._scenario!r}")
            return self.catalog.task(scenario, int(row["task_idx"]))
        key = (env._scenario, env._rounds, env._slot // self.num_generations)
        with self._lock:
            if key not in self._assigned:
                self._assigned[key] = next(self._order[env._scenario])
            return self._assigned[key]

    def _reward(self, env: AWMEnvironment) -> float:
        if env._episode is None:
            raise IntegrationError(f"get_reward() on a slot of {env._scenario!r} that was never reset")
        if env._episode.reward is None:
            with self._lock:
                pending = [e for e in self._envs if e._episode is not None and e._episode.reward is None]
            self._score(pending)
        assert env._episode.reward is not None
        return env._episode.reward

    def _score(self, envs: list[AWMEnvironment]) -> None:
        """Snapshot and judge the given slots' episodes in one verifier batch; record each."""
        from awm_rl.agent.episode import Episode
        from awm_rl.reward import score_episodes

        episodes, records = [], []
        for env in envs:
            ep, task = env._episode, env._task
            assert ep is not None and task is not None
            initial, final = self.pool.snapshot(env._handle)
            ep.initial_db_sha256 = hashlib.sha256(Path(initial).read_bytes()).hexdigest()
            termination = "environment_error" if ep.environment_error else "final_answer"
            episodes.append(Episode(scenario=ep.scenario, task_idx=ep.task_idx, task=task.task, policy="trl",
                                    window=None, max_turns=0, termination=termination,
                                    termination_detail=ep.environment_error, initial_db=str(initial),
                                    final_db=str(final), final_answer=env._final_answer))
            records.append(task)
        for env, score in zip(envs, score_episodes(episodes, records, self.judge), strict=True):
            ep = env._episode
            assert ep is not None
            ep.reward, ep.outcome, ep.reasons = score.reward, score.outcome, score.reasons
            if score.judge is not None:
                ep.classification, ep.verifier = score.judge.classification, score.judge.verifier
            self.episodes.append(ep)
