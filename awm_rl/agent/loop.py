"""The meta-tool agent loop (paper point 9): policy turns, format checks, tool calls, history window.

One episode: acquire an isolated instance from the runtime pool, show the policy the system
prompt and the task, then alternate model turns and environment answers for at most
`max_turns` turns. Every turn is format-checked first (`FormatValidator`); a format error stops
the episode (reward -1), a server-side failure stops it as an environment error (reward 0), a
turn without a tool call is the final answer. The policy sees the system prompt, the task, the
first list_tools exchange and the last `window` exchanges; the full conversation is recorded.
At the end the instance's initial and final databases are snapshotted for the verifier.

Multi-turn conversations (an external benchmark such as BFCL): an environment that also has
`next_user_turn(handle)` is asked for the next user message whenever the policy gives its final
answer; the episode ends when it returns None. A `UserTurn` may widen the tool set (tools added
mid-conversation). With `format_error="next_user_turn"` a format error is answered with a tool
message naming the rule and nothing is executed; the conversation moves on to the next user
message, as BFCL's own harness does with an undecodable turn. An environment whose `snapshot`
returns None has no databases to keep.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from awm_rl.agent.episode import Episode, Step, ToolOutcome
from awm_rl.agent.policies import Policy, PolicyConfigError, PolicyError, PolicyRequest
from awm_rl.agent.qwen3 import DEFAULT_SYSTEM_PROMPT, parse_response
from awm_rl.agent.validator import FormatValidator

MAX_TOOL_TEXT = 16_000  # characters of one call_tool answer shown to the policy (list_tools: all)


class ToolResultLike(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def status(self) -> int | None: ...
    @property
    def text(self) -> str: ...
    @property
    def error_kind(self) -> str | None: ...


class ToolEnvironments(Protocol):
    """What the loop needs from its environments (handles are opaque): `awm_rl.runtime.pool.EnvironmentPool`,
    or an external benchmark's environments (BFCL, τ²)."""

    def acquire(self, scenario: str) -> Any: ...
    def list_tools(self, handle: Any) -> list[dict[str, Any]]: ...
    def call_tool(self, handle: Any, name: str, arguments: dict[str, Any]) -> ToolResultLike: ...
    def reset(self, handle: Any) -> None: ...
    def snapshot(self, handle: Any) -> tuple[Path, Path] | None: ...
    def release(self, handle: Any) -> None: ...


def scenario_tools(pool: ToolEnvironments, scenario: str) -> list[dict[str, Any]]:
    """A scenario's tool listing as the policy reads it, from an instance acquired for it and released."""
    handle = pool.acquire(scenario)
    try:
        return pool.list_tools(handle)
    finally:
        pool.release(handle)


@dataclass
class UserTurn:
    """The next user message of a multi-turn episode; `tools`: the whole tool list when it changed."""

    content: str
    tools: list[dict[str, Any]] | None = None


@dataclass
class EpisodeSpec:
    """Which task to run."""

    scenario: str
    task_idx: int
    task: str


@dataclass
class LoopConfig:
    max_turns: int = 20
    window: int | None = 10  # None: the whole history
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_argument_bytes: int = 8192
    max_response_chars: int = 24_000
    # The two databases are copied here (one subfolder per episode) before the instance is
    # released, since the runtime deletes its snapshot on release. None: a temp folder.
    snapshot_dir: Path | None = None
    # Multi-turn episodes: model turns allowed per user message (None: only max_turns bounds them),
    # what a format error does ("stop": end the episode; "next_user_turn": tell the policy, go on
    # with the next user message) and format rules not enforced (see FormatValidator.waived).
    max_turns_per_user_turn: int | None = None
    format_error: str = "stop"
    waived_rules: frozenset[str] = frozenset()
    # Characters of one call_tool answer shown to the policy (None: all of it).
    max_tool_text: int | None = MAX_TOOL_TEXT


def is_environment_failure(result: ToolResultLike) -> bool:
    """A failure the agent did not cause: a 5xx answer, or no HTTP answer at all (crash, timeout)."""
    if result.ok:
        return False
    if result.error_kind in ("agent", "environment"):  # the runtime's own classification
        return result.error_kind == "environment"
    return result.status is None or result.status >= 500


def window_messages(messages: list[dict[str, Any]], window: int | None) -> list[dict[str, Any]]:
    """System + task + the first exchange (list_tools) + the last `window` exchanges.

    `messages` is [system, user, (assistant, tool)*, assistant?]; an exchange is one assistant
    turn and the tool answer that followed it.
    """
    head, body = messages[:2], messages[2:]
    exchanges = [body[i:i + 2] for i in range(0, len(body), 2)]
    if window is None or len(exchanges) <= window + 1:
        return list(messages)
    kept = exchanges[:1] + (exchanges[-window:] if window > 0 else [])
    return head + [m for exchange in kept for m in exchange]


def run_episode(pool: ToolEnvironments, policy: Policy, spec: EpisodeSpec, config: LoopConfig | None = None) -> Episode:
    """Run one task to its end; never raises for policy, format or environment failures. A policy that cannot
    work as configured (`PolicyConfigError`: no key, unknown model) raises: that is no episode's outcome."""
    config = config or LoopConfig()
    started = time.perf_counter()
    rule = getattr(policy, "reasoning", "required")
    episode = Episode(scenario=spec.scenario, task_idx=spec.task_idx, task=spec.task, policy=policy.name,
                      window=config.window, max_turns=config.max_turns, reasoning_rule=rule)
    episode.messages = [{"role": "system", "content": config.system_prompt},
                        {"role": "user", "content": spec.task}]
    waived = frozenset(config.waived_rules) | ({"reasoning"} if rule == "optional" else frozenset())
    validator = FormatValidator(max_argument_bytes=config.max_argument_bytes,
                                max_response_chars=config.max_response_chars, waived=waived)
    try:
        handle = pool.acquire(spec.scenario)
    except Exception as exc:  # noqa: BLE001  the runtime's failure is an environment error
        episode.termination = "environment_error"
        episode.termination_detail = f"could not acquire an instance of {spec.scenario!r}: {type(exc).__name__}: {exc}"
        episode.wall_s = time.perf_counter() - started
        return episode
    try:
        try:
            _turns(pool, handle, policy, spec, config, episode, validator)
        except PolicyConfigError:
            raise
        except Exception as exc:  # noqa: BLE001  e.g. a tool schema from generated code jsonschema rejects
            episode.termination = "environment_error"
            episode.termination_detail = f"the episode could not go on: {type(exc).__name__}: {exc}"
        try:
            snapshot = pool.snapshot(handle)
            if snapshot is None:
                raise _NoSnapshot
            initial_db, final_db = snapshot
            folder = config.snapshot_dir or Path(tempfile.gettempdir()) / "awm-episodes"
            initial_db, final_db = _keep_snapshot(Path(initial_db), Path(final_db), folder, spec)
            episode.initial_db, episode.final_db = str(initial_db), str(final_db)
        except _NoSnapshot:
            pass
        except Exception as exc:  # noqa: BLE001 - recorded as the episode's environment error
            if episode.termination in ("final_answer", "max_turns"):
                episode.termination = "environment_error"
                episode.termination_detail = f"snapshot of the databases failed: {type(exc).__name__}: {exc}"
    finally:
        try:
            pool.release(handle)
        except Exception:  # noqa: BLE001  releasing must not hide the episode
            pass
    episode.wall_s = time.perf_counter() - started
    return episode


class _NoSnapshot(Exception):
    """The environment keeps no databases (snapshot returned None)."""


def _next_user_turn(pool: ToolEnvironments, handle: Any) -> UserTurn | None:
    follow = getattr(pool, "next_user_turn", None)
    return follow(handle) if follow is not None else None


def _turns(pool: ToolEnvironments, handle: Any, policy: Policy, spec: EpisodeSpec, config: LoopConfig,
           episode: Episode, validator: FormatValidator) -> None:
    user_turn, turn_in_user_turn = 0, 0

    def advance() -> bool:
        """Append the next user message, if any (True), after a final answer or a skipped turn."""
        nonlocal user_turn, turn_in_user_turn
        follow = _next_user_turn(pool, handle)
        if follow is None:
            return False
        user_turn, turn_in_user_turn = user_turn + 1, 0
        episode.messages.append({"role": "user", "content": follow.content})
        if follow.tools is not None and validator.tools is not None:
            validator.record_tools(follow.tools)
        return True

    for turn in range(config.max_turns):
        if config.max_turns_per_user_turn is not None and turn_in_user_turn >= config.max_turns_per_user_turn:
            episode.termination = "max_turns"
            episode.termination_detail = (f"user turn {user_turn}: no final answer within "
                                          f"{config.max_turns_per_user_turn} model turns")
            return
        turn_in_user_turn += 1
        request = PolicyRequest(messages=window_messages(episode.messages, config.window),
                                scenario=spec.scenario, task_idx=spec.task_idx, turn=turn)
        t0 = time.perf_counter()
        try:
            output = policy.generate(request)
        except PolicyConfigError:
            raise
        except PolicyError as exc:
            episode.termination, episode.termination_detail = "policy_error", str(exc)
            return
        except Exception as exc:  # noqa: BLE001  a broken policy must not kill concurrent episodes
            episode.termination = "policy_error"
            episode.termination_detail = f"{type(exc).__name__}: {exc}"
            return
        latency = (time.perf_counter() - t0) * 1000.0
        parsed = parse_response(output.text)
        check = validator.check(parsed, truncated=output.finish_reason == "length")
        step = Step(turn=turn, response=output.text, finish_reason=output.finish_reason, format=check.as_dict(),
                    prompt_tokens=output.prompt_tokens, completion_tokens=output.completion_tokens,
                    cost_usd=output.cost_usd, latency_ms=output.latency_ms or latency, user_turn=user_turn)
        episode.steps.append(step)
        episode.messages.append({"role": "assistant", "content": output.text})
        if not check.ok and config.format_error == "next_user_turn":
            episode.messages.append({"role": "tool", "content": f"Format error ({check.rule}): {check.detail}. "
                                     "Nothing was executed; this request is over."})
            if advance():
                continue
        if not check.ok:
            episode.termination = "format_error"
            episode.format_rule = check.rule
            episode.termination_detail = f"turn {turn}: {check.rule}: {check.detail}"
            return
        if check.action == "final_answer":
            episode.final_answer = check.final_answer
            if advance():
                continue
            episode.termination = "final_answer"
            return
        step.tool = _act(pool, handle, check.action, check.tool_name, check.arguments or {}, validator)
        episode.messages.append({"role": "tool", "content": _shown(step.tool.text, check.action, config.max_tool_text)})
        if not step.tool.ok and (check.action == "list_tools" or is_environment_failure(step.tool)):
            episode.termination = "environment_error"
            episode.termination_detail = (f"turn {turn}: {check.action} {check.tool_name or ''} failed on the server "
                                          f"(status {step.tool.status}, {step.tool.error_kind}): {step.tool.text[:300]}")
            return
    episode.termination = "max_turns"
    episode.termination_detail = f"no final answer within {config.max_turns} turns"


def _shown(text: str, action: str | None, limit: int | None = MAX_TOOL_TEXT) -> str:
    """What the policy sees of a tool answer: list_tools whole, call_tool answers capped."""
    if action == "list_tools" or limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters truncated]"


def _act(pool: ToolEnvironments, handle: Any, action: str | None, tool_name: str | None, arguments: dict[str, Any],
         validator: FormatValidator) -> ToolOutcome:
    t0 = time.perf_counter()
    try:
        if action == "list_tools":
            tools = pool.list_tools(handle)
            validator.record_tools(tools)
            text = json.dumps(tools, ensure_ascii=False)
            return ToolOutcome(ok=True, status=200, text=text, latency_ms=(time.perf_counter() - t0) * 1000.0)
        assert tool_name is not None, "a tool call names its tool"
        result = pool.call_tool(handle, tool_name, arguments)
    except Exception as exc:  # noqa: BLE001  a runtime exception is a server failure, not the agent's
        return ToolOutcome(ok=False, status=None, text=f"{type(exc).__name__}: {exc}", error_kind="runtime_exception",
                           latency_ms=(time.perf_counter() - t0) * 1000.0)
    validator.record_call_result(bool(result.ok))
    return ToolOutcome(ok=bool(result.ok), status=result.status, text=result.text or "",
                       error_kind=result.error_kind, latency_ms=(time.perf_counter() - t0) * 1000.0)


def _keep_snapshot(initial: Path, final: Path, folder: Path, spec: EpisodeSpec) -> tuple[Path, Path]:
    target = Path(folder) / f"{spec.scenario}.t{spec.task_idx}.{uuid.uuid4().hex[:8]}"
    target.mkdir(parents=True, exist_ok=True)
    out = target / "initial.db", target / "final.db"
    shutil.copyfile(initial, out[0])
    shutil.copyfile(final, out[1])
    return out


def discard_snapshot(episode: Episode) -> None:
    """Delete the episode's database copies (after judging), leaving the record intact."""
    for path in (episode.initial_db, episode.final_db):
        if path:
            Path(path).unlink(missing_ok=True)
    if episode.final_db:
        try:
            Path(episode.final_db).parent.rmdir()
        except OSError:
            pass


def run_episodes(pool: ToolEnvironments, policy: Policy, specs: list[EpisodeSpec], config: LoopConfig | None = None,
                 *, concurrency: int = 8) -> list[Episode]:
    """Run episodes concurrently (threads; each holds its own instance); results in input order."""
    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(specs)))) as executor:
        return list(executor.map(lambda s: run_episode(pool, policy, s, config), specs))
