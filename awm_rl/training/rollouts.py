"""Rollouts for training: the agent loop in many threads, their turns generated in batches.

Every episode runs the shared meta-tool loop (`awm_rl.agent.run_episode`: format checks with early
stop, environment calls on the Ray pool, the history window), each in its own thread. The policy
those threads call does not generate by itself: it renders the turn's prompt, hands it to a
`GenerationBroker` and waits. The trainer's thread serves the broker, generating every waiting
turn in one batch (vLLM or transformers, through the trainer's own generation path, so weights
are synced and sampling settings apply), and the policy records the exact prompt and completion
tokens of each turn for the history-aware samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from awm_rl.agent.episode import Episode
from awm_rl.agent.loop import EpisodeSpec, LoopConfig, ToolEnvironments, run_episode
from awm_rl.agent.policies import PolicyError, PolicyOutput, PolicyRequest
from awm_rl.training.samples import TurnTokens, render_prompt_ids

# (prompt token lists) -> (completion token lists, per-token sampling logprobs or None)
GenerateFn = Callable[[list[list[int]]], tuple[list[list[int]], list[list[float]] | None]]


@dataclass
class _Pending:
    prompt_ids: list[int]
    future: Future


class GenerationBroker:
    """Turn requests from episode threads, answered in batches by whoever calls `serve`."""

    def __init__(self, *, batch_wait_s: float = 0.02, max_batch: int | None = None) -> None:
        self.batch_wait_s = batch_wait_s
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._cv = threading.Condition()
        self._active = 0  # episodes currently running (waiting for a turn, or acting on the environment)
        self.batches: list[int] = []  # sizes of the batches served (for metrics)
        self.generation_s = 0.0  # wall seconds spent inside `generate`
        self.generation_spans: list[tuple[float, float]] = []  # perf_counter intervals of those calls
        self.failed_batches = 0  # batches whose generation raised (their prompts were retried one by one)
        self.retried_prompts = 0
        self.failed_prompts = 0  # prompts that failed alone too: their episodes end with a policy error
        self.errors: list[str] = []

    def episode_started(self) -> None:
        with self._cv:
            self._active += 1

    def episode_finished(self) -> None:
        with self._cv:
            self._active -= 1
            self._cv.notify_all()

    def request(self, prompt_ids: list[int]) -> Future:
        future: Future = Future()
        with self._cv:
            self._pending.append(_Pending(prompt_ids, future))
            self._cv.notify_all()
        return future

    def serve(self, generate: GenerateFn, done: Callable[[], bool]) -> None:
        """Generate waiting turns in batches until `done()`; a batch closes when every running episode
        is waiting, or `batch_wait_s` after its first request. When a batch fails, each of its prompts is
        retried alone, so one bad request fails only its own turn (counted in `failed_prompts`)."""
        while True:
            with self._cv:
                while not self._pending and not done():
                    self._cv.wait(timeout=0.05)
                if not self._pending and done():
                    return
                deadline = time.monotonic() + self.batch_wait_s
                while len(self._pending) < self._active and time.monotonic() < deadline:
                    self._cv.wait(timeout=max(0.0, deadline - time.monotonic()))
                take = len(self._pending) if self.max_batch is None else min(self.max_batch, len(self._pending))
                batch, self._pending = self._pending[:take], self._pending[take:]
            self.batches.append(len(batch))
            try:
                results = self._generate(generate, batch)
            except BaseException as exc:  # retried per prompt below; training goes on
                if not isinstance(exc, Exception):
                    for p in batch:
                        p.future.set_exception(exc)
                    raise
                self.failed_batches += 1
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                if len(batch) == 1:
                    self.failed_prompts += 1
                    batch[0].future.set_exception(exc)
                    continue
                for p in batch:
                    self.retried_prompts += 1
                    try:
                        (result,) = self._generate(generate, [p])
                    except Exception as single:  # noqa: BLE001  this prompt's episode ends with a policy error
                        self.failed_prompts += 1
                        self.errors.append(f"{type(single).__name__}: {single}"[:300])
                        p.future.set_exception(single)
                    else:
                        p.future.set_result(result)
                continue
            for p, result in zip(batch, results, strict=True):
                p.future.set_result(result)

    def _generate(self, generate: GenerateFn, batch: list[_Pending]) -> list[tuple[list[int], list[float] | None]]:
        started = time.perf_counter()
        try:
            completions, logprobs = generate([p.prompt_ids for p in batch])
        finally:
            ended = time.perf_counter()
            self.generation_s += ended - started
            self.generation_spans.append((started, ended))
        if len(completions) != len(batch):
            raise RuntimeError(f"generation returned {len(completions)} completions for {len(batch)} prompts")
        return [(list(completions[i]), list(logprobs[i]) if logprobs is not None else None) for i in range(len(batch))]


class RecordingPolicy:
    """The trainer's policy as the agent loop sees it: renders, asks the broker, decodes, records tokens.

    Thread-safe; turns are recorded per thread (one episode runs start to end in one thread).
    """

    name = "grpo-policy"

    def __init__(self, tokenizer: Any, broker: GenerationBroker, *, eos_token_ids: list[int],
                 max_response_tokens: int, max_context_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.broker = broker
        self.eos_token_ids = set(eos_token_ids)
        self.max_response_tokens = max_response_tokens
        self.max_context_tokens = max_context_tokens
        self._local = threading.local()
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer's settings are mutated per call: one at a time

    def begin_episode(self) -> None:
        self._local.turns = []

    def end_episode(self) -> list[TurnTokens]:
        turns, self._local.turns = self._local.turns, []
        return turns

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        started = time.perf_counter()
        with self._tokenizer_lock:
            prompt_ids = render_prompt_ids(self.tokenizer, request.messages)
        if len(prompt_ids) + self.max_response_tokens > self.max_context_tokens:
            raise PolicyError(f"context overflow at turn {request.turn}: prompt of {len(prompt_ids)} tokens + "
                              f"{self.max_response_tokens} response tokens exceeds max_context_tokens "
                              f"{self.max_context_tokens}")
        completion_ids, logprobs = self.broker.request(prompt_ids).result()
        if not completion_ids:
            raise PolicyError(f"turn {request.turn}: the model generated no token")
        self._local.turns.append(TurnTokens(prompt_ids, completion_ids, logprobs))
        finished = completion_ids[-1] in self.eos_token_ids
        with self._tokenizer_lock:
            text = self.tokenizer.decode([t for t in completion_ids if t not in self.eos_token_ids],
                                         skip_special_tokens=False)
        return PolicyOutput(text=text, finish_reason="stop" if finished else "length",
                            prompt_tokens=len(prompt_ids), completion_tokens=len(completion_ids),
                            latency_ms=(time.perf_counter() - started) * 1000.0)


@dataclass
class Rollout:
    """One finished episode and the tokens of each of its turns."""

    episode: Episode
    turns: list[TurnTokens]


def run_rollouts(pool: ToolEnvironments, specs: list[EpisodeSpec], policy: RecordingPolicy, generate: GenerateFn,
                 loop_config: LoopConfig, *, concurrency: int = 256) -> list[Rollout]:
    """Run every spec as an episode (threads) while this thread serves their generations; input order kept."""
    broker = policy.broker

    def one(spec: EpisodeSpec) -> Rollout:
        policy.begin_episode()
        broker.episode_started()
        try:
            episode = run_episode(pool, policy, spec, loop_config)
        finally:
            broker.episode_finished()
        return Rollout(episode, policy.end_episode())

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(specs))), thread_name_prefix="awm-rollout") as ex:
        futures = [ex.submit(one, spec) for spec in specs]
        broker.serve(generate, done=lambda: all(f.done() for f in futures))
        return [f.result() for f in futures]


_SCHEMA_DOC_KEYS = frozenset({"description", "title", "example", "examples"})


def _strip_docs(schema: Any) -> Any:
    """Drop documentation keywords, never property names (a tool may take a `title` or `description`)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                out[key] = {name: _strip_docs(sub) for name, sub in value.items()}
            elif key not in _SCHEMA_DOC_KEYS:
                out[key] = _strip_docs(value)
        return out
    if isinstance(schema, list):
        return [_strip_docs(v) for v in schema]
    return schema


class CompactToolsPool:
    """A view of the environment pool whose `list_tools` omits documentation (descriptions, titles, examples).

    For tiny CPU models only (`rollout.tool_listing: compact`): a tool listing of thousands of tokens
    is most of every prompt, and a model of a few hundred thousand parameters cannot use the prose.
    Names and schemas are unchanged, so the format validator checks exactly the same rules.
    """

    def __init__(self, pool: ToolEnvironments) -> None:
        self.pool = pool
        self._cache: dict[str, list[dict[str, Any]]] = {}

    def list_tools(self, handle: Any) -> list[dict[str, Any]]:
        scenario: str = getattr(handle, "scenario", "")
        if scenario not in self._cache:
            self._cache[scenario] = [{"name": t["name"], "input_schema": _strip_docs(t.get("input_schema") or {})}
                                     for t in self.pool.list_tools(handle)]
        return self._cache[scenario]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


class BusyClock:
    """Wall time during which at least one call was in flight (the union of overlapping calls), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        self._since = 0.0
        self.spans: list[tuple[float, float]] = []  # perf_counter intervals with >= 1 call in flight
        self.calls = 0
        self.call_s = 0.0  # summed per-call seconds (counts overlapping calls separately)

    def start(self) -> float:
        now = time.perf_counter()
        with self._lock:
            if self._inflight == 0:
                self._since = now
            self._inflight += 1
        return now

    def stop(self, started: float) -> None:
        now = time.perf_counter()
        with self._lock:
            self._inflight -= 1
            self.calls += 1
            self.call_s += now - started
            if self._inflight == 0:
                self.spans.append((self._since, now))

    @property
    def busy_s(self) -> float:
        return sum(end - start for start, end in self.spans)


def overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds covered by both interval lists (each list's intervals are disjoint)."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


class TimedPool:
    """A view of the environment pool that clocks every environment call (acquire, list_tools, call_tool,
    snapshot, release, ...), so a step's rollout time splits into generation, environments and waiting."""

    _UNTIMED = frozenset({"prefetch_instances", "close"})

    def __init__(self, pool: Any, clock: BusyClock) -> None:
        self.pool = pool
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.pool, name)
        if name in self._UNTIMED or not callable(attr):
            return attr
        clock = self.clock

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock.start()
            try:
                return attr(*args, **kwargs)
            finally:
                clock.stop(started)
        return timed


def time_split(rollout_s: float, broker: GenerationBroker, clock: BusyClock) -> dict[str, float]:
    """The rollout phase's wall time split: generating (the trainer inside `generate`), environment
    calls while nothing was generating, and the rest (waiting: batch windows, prompt rendering, threads).
    `env_busy_s` counts all wall time with an environment call in flight, generation overlapping or not."""
    env_busy = clock.busy_s
    env_only = max(0.0, env_busy - overlap_s(broker.generation_spans, clock.spans))
    return {"generation_s": round(broker.generation_s, 4), "env_s": round(env_only, 4),
            "env_busy_s": round(env_busy, 4), "env_calls": clock.calls, "env_call_s": round(clock.call_s, 4),
            "waiting_s": round(max(0.0, rollout_s - broker.generation_s - env_only), 4)}


@dataclass
class ScoredRound:
    """One batch of rollouts run and judged: a step's scheduled tasks, or a curriculum's refill groups.
    `rows` are the dataset rows (one per rollout, G consecutive rows per task); `failed` marks policy-side
    failures (unscored)."""

    rows: list[dict[str, Any]]
    rollouts: list[Rollout]
    scores: list[Any]  # awm_rl.agent.episode.EpisodeScore, one per rollout
    failed: list[bool]
    rollout_s: float
    judge_s: float
    split: dict[str, float]
    broker: GenerationBroker


@dataclass
class StepRollouts:
    """What a step trains on: the final groups (`rows`, `rollouts`, `scores`, `failed`; `train` False for a
    rollout whose group gives no samples) and the totals of every round run for it (time, generation batches).
    Without a curriculum: the one round, every rollout trained on."""

    rows: list[dict[str, Any]]
    rollouts: list[Rollout]
    scores: list[Any]
    failed: list[bool]
    train: list[bool]
    rounds: list[ScoredRound]
    curriculum: dict[str, Any] | None = None  # the curriculum's choices this step (awm_rl.training.curriculum)

    @classmethod
    def single(cls, scored: ScoredRound) -> "StepRollouts":
        return cls(scored.rows, scored.rollouts, scored.scores, scored.failed, [True] * len(scored.rows), [scored])

    @property
    def rollout_s(self) -> float:
        return sum(r.rollout_s for r in self.rounds)

    @property
    def judge_s(self) -> float:
        return sum(r.judge_s for r in self.rounds)

    @property
    def split(self) -> dict[str, float]:
        keys = self.rounds[0].split.keys()
        return {k: round(sum(r.split[k] for r in self.rounds), 4) if isinstance(self.rounds[0].split[k], float)
                else sum(r.split[k] for r in self.rounds) for k in keys}

    @property
    def batches(self) -> list[int]:
        return [size for r in self.rounds for size in r.broker.batches]

    def broker_total(self, name: str) -> int:
        """A GenerationBroker counter (failed_batches, retried_prompts, failed_prompts) summed over the rounds."""
        return sum(getattr(r.broker, name) for r in self.rounds)

    @property
    def broker_errors(self) -> list[str]:
        return [e for r in self.rounds for e in r.broker.errors]


class StepRecords:
    """Adds every scored batch of training rollouts to the store's per-task difficulty records
    (awm_resources.difficulty): one part per batch, named by step, trainer process and batch, so no writer
    overwrites another's."""

    def __init__(self, store_root: Any, *, run: str, policy: str, rank: int = 0) -> None:
        from awm_resources.store import ArtifactStore

        self.store = ArtifactStore(store_root)
        self.run, self.policy, self.rank = run, policy, rank
        self._batches: dict[int, int] = {}

    def record(self, step: int, scored: ScoredRound) -> None:
        from awm_resources.difficulty import record_rollouts
        from awm_rl.evaluation.catalog import outcome_rows

        batch = self._batches.get(step, 0)
        self._batches[step] = batch + 1
        rows = outcome_rows([r.episode for r in scored.rollouts], scored.scores, scored.failed)
        record_rollouts(self.store, run=self.run, source="training", policy=self.policy, rows=rows, step=step,
                        part=f"step_{step:04d}-rank{self.rank}-batch{batch}")
