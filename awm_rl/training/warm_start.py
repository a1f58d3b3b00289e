"""A short supervised warm start on scripted, format-valid trajectories (tiny models, demos).

A randomly initialised policy never produces a valid meta-tool call, so every rollout scores -1,
every group-relative advantage is 0 and GRPO has nothing to learn from. Seconds of
supervised training on real episodes of the training environments (list_tools, one call_tool
with schema-valid arguments, a final answer) makes some sampled turns valid and others not, so
rewards vary within groups. The trajectories are real episodes through the same loop, pool and
format validator as training; only the episodes that pass every format check are kept, and each
becomes history-aware samples exactly like the GRPO ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from awm_rl.agent.episode import Episode
from awm_rl.agent.loop import EpisodeSpec, LoopConfig, ToolEnvironments, discard_snapshot, run_episode, scenario_tools
from awm_rl.agent.policies import ScriptedPolicy
from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, render_turn
from awm_rl.reward.tasks import TaskRecord
from awm_rl.training.samples import render_prompt_ids, turn_context

_TYPE_DEFAULTS = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) > 2}


def example_arguments(schema: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments for the required properties of a tool's input schema (examples, enums, type defaults)."""
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = props.get(name) or {}
        if "example" in prop:
            args[name] = prop["example"]
        elif prop.get("examples"):
            args[name] = prop["examples"][0]
        elif prop.get("enum"):
            args[name] = prop["enum"][0]
        elif "default" in prop:
            args[name] = prop["default"]
        elif prop.get("type") in _TYPE_DEFAULTS:
            args[name] = _TYPE_DEFAULTS[prop["type"]]
        else:
            return None
    return args


def pick_call(task: str, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The tool whose name best matches the task, preferring tools without required arguments."""
    words = _words(task)
    ranked = []
    for tool in tools:
        args = example_arguments(tool.get("input_schema") or {})
        if args is None:
            continue
        overlap = len(words & _words(tool["name"]))
        ranked.append((len(args) > 0, -overlap, tool["name"], args))
    if not ranked:
        return None
    ranked.sort(key=lambda r: r[:3])
    return ranked[0][2], ranked[0][3]


def scripted_turns(task: str, tools: list[dict[str, Any]]) -> list[str] | None:
    choice = pick_call(task, tools)
    if choice is None:
        return None
    name, args = choice
    # Short, mostly constant texts: a tiny model learns the format in seconds; the tool name is what varies.
    return [list_tools_turn(), call_tool_turn("I will call the tool that fits the task.", name, args),
            render_turn("The call succeeded; I can report the result.", None, "Done: the result is above.")]


def warm_start_samples(pool: ToolEnvironments, tasks: list[TaskRecord], tokenizer: Any, loop_config: LoopConfig,
                       *, tasks_per_scenario: int) -> tuple[list[tuple[list[int], list[int]]], int, int]:
    """(prompt ids, target ids) per turn of the kept scripted episodes; plus episodes run and kept."""
    chosen: list[TaskRecord] = []
    per: dict[str, int] = {}
    for record in tasks:
        if per.get(record.scenario, 0) < tasks_per_scenario:
            chosen.append(record)
            per[record.scenario] = per.get(record.scenario, 0) + 1
    tools_of = {scenario: scenario_tools(pool, scenario) for scenario in per}
    scripts = {}
    for record in chosen:
        script = scripted_turns(record.task, tools_of[record.scenario])
        if script is not None:
            scripts[(record.scenario, record.task_idx)] = script
    return replay_samples(pool, ScriptedPolicy(scripts, name="warm-start"), chosen, tokenizer, loop_config)


def replay_samples(pool: ToolEnvironments, policy: ScriptedPolicy, tasks: list[TaskRecord], tokenizer: Any,
                   loop_config: LoopConfig) -> tuple[list[tuple[list[int], list[int]]], int, int]:
    """Replay `policy`'s script of each task through the real loop and pool; every turn of an episode
    that ended with a final answer becomes (prompt ids, target ids) exactly as a GRPO sample sees it.
    Returns the samples, the episodes run (tasks with a script) and those kept."""
    samples: list[tuple[list[int], list[int]]] = []
    ran = kept = 0
    for record in tasks:
        if (record.scenario, record.task_idx) not in policy.scripts:
            continue
        ran += 1
        episode = run_episode(pool, policy, EpisodeSpec(record.scenario, record.task_idx, record.task), loop_config)
        discard_snapshot(episode)
        if episode.termination != "final_answer":
            continue
        kept += 1
        samples += episode_samples(episode, tokenizer, loop_config.window)
    return samples, ran, kept


def episode_samples(episode: Episode, tokenizer: Any, window: int | None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) of every turn of `episode`, exactly as a GRPO sample of that turn sees it."""
    eos = tokenizer.eos_token
    out = []
    for step in episode.steps:
        prompt = render_prompt_ids(tokenizer, turn_context(episode.messages, step.turn, window))
        out.append((prompt, list(tokenizer(step.response + eos, add_special_tokens=False)["input_ids"])))
    return out


def supervised_steps(model: Any, tokenizer: Any,  # noqa: ARG001 - unused (samples are token ids); 4 callers pass it
                     samples: list[tuple[list[int], list[int]]], *, steps: int,
                     learning_rate: float, seed: int = 0, target_loss: float | None = None,
                     stop_when: Callable[[list[float]], bool] | None = None,
                     weights: list[float] | None = None) -> list[float]:
    """AdamW steps (all samples per step) of next-token loss on the targets; returns the loss per step.

    Stops early once the loss is below `target_loss` (the loss curve of a tiny model at a high
    learning rate varies from run to run; a loss target gives a repeatable starting policy), or
    before the update of a step where `stop_when(summed target NLL of each sample, in nats)` holds
    (a partial warm start: e.g. once the reference turns have a given probability under the policy).
    `weights` counts each sample that many times in the loss (identical turns of several episodes given once).

    Each prompt is encoded without gradient into a KV cache and only the target tokens run with
    gradient: the turn format is learnt from the real, full contexts at a fraction of the cost
    (the prompt's own representations are not trained, which a warm start does not need).
    """
    import torch

    if not samples:
        raise ValueError("warm start: no scripted episode passed the format checks, so there is nothing to learn from")
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate,
                                  weight_decay=0.0)
    weights = weights or [1.0] * len(samples)
    if len(weights) != len(samples):
        raise ValueError(f"warm start: {len(weights)} weights for {len(samples)} samples")
    total = sum(w * len(t) for w, (_, t) in zip(weights, samples, strict=True))
    losses = []
    model.train()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        nll: list[float] = []
        for weight, (prompt, target) in zip(weights, samples, strict=True):
            with torch.no_grad():
                cache = model(input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True).cache
            inputs = torch.tensor([[prompt[-1]] + target[:-1]], device=device)
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + inputs.size(1), device=device).unsqueeze(0)
            logits = model(input_ids=inputs, cache=cache, position_ids=positions, use_cache=False).logits[0]
            summed = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(target, device=device),
                                                       reduction="sum")
            loss = summed * (weight / total)
            loss.backward()
            step_loss += loss.item()
            nll.append(summed.item())
        if stop_when is not None and stop_when(nll):
            losses.append(step_loss)
            break
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(step_loss)
        if target_loss is not None and step_loss < target_loss:
            break
    model.eval()
    return losses
