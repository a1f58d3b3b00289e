"""Policies: whatever turns a conversation into the next Qwen3-format turn.

- `ChatModelPolicy`: any litellm chat model through `awm_resources.llm.LLMClient` (API models, or
  a vLLM / OpenAI-compatible server: `hosted_vllm/<model>` with `api_base`). Its turn is the model's answer as
  it answered: reasoning the provider returned apart comes back as `<think>`, and in native tool-calling mode
  (`tool_calling="native"`) the provider's function calls come back as `<tool_call>` text.
- `TransformersPolicy`: a local Hugging Face model, rendered with its chat template (Qwen3).
- `VLLMPolicy`: vLLM in-process, only when `vllm` is installed (GPU machines).
- `ScriptedPolicy`: replays fixed turns, e.g. a reference solution (`seeds/solutions/<scenario>.json`),
  for offline tests and demos.

All are thread-safe: the loop runs episodes concurrently and calls `generate` from many threads.
Every policy has a reasoning rule, `reasoning`: "required" (the paper's format rule: a `<think>` block every
turn; the default of every policy being trained) or "optional" (for models whose provider keeps the reasoning
hidden); the loop waives the format rule for "optional" and records the rule in every episode.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from awm_rl.agent.qwen3 import (
    META_TOOLS,
    as_chat_api_messages,
    as_native_messages,
    call_tool_turn,
    list_tools_turn,
    render_native_turn,
    render_turn,
    with_reasoning,
)

REASONING_RULES = ("required", "optional")
TOOL_CALLING_MODES = ("text", "native")


@dataclass
class PolicyRequest:
    """The (already window-truncated) conversation and where it comes from."""

    messages: list[dict[str, Any]]
    scenario: str
    task_idx: int
    turn: int


@dataclass
class PolicyOutput:
    """One generated turn. `finish_reason == "length"` marks a turn cut by the generation limit."""

    text: str
    finish_reason: str | None = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0


class PolicyError(RuntimeError):
    """The policy could not produce a turn (transport failure, missing script, ...)."""


class PolicyConfigError(PolicyError):
    """The policy cannot work as configured (no or refused API key, unknown model or endpoint): not an episode's
    outcome, so the loop lets it through and a command stops at once with this one message."""


class Policy(Protocol):
    name: str

    def generate(self, request: PolicyRequest) -> PolicyOutput: ...


# ----------------------------------------------------------------------------------------- scripted
class ScriptedPolicy:
    """Replays fixed turns per (scenario, task_idx); turn n gets the n-th text (or PolicyOutput,
    e.g. one with finish_reason="length" standing for a generation cut at its limit)."""

    reasoning = "required"
    tool_calling = "text"

    def __init__(self, scripts: Mapping[tuple[str, int], Sequence[str | PolicyOutput]], name: str = "scripted") -> None:
        self.scripts = scripts
        self.name = name

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        script = self.scripts.get((request.scenario, request.task_idx))
        if script is None:
            raise PolicyError(f"{self.name}: no script for scenario {request.scenario!r} task {request.task_idx}")
        if request.turn >= len(script):
            raise PolicyError(f"{self.name}: script for {request.scenario!r} task {request.task_idx} "
                              f"has {len(script)} turns, turn {request.turn} requested")
        item = script[request.turn]
        return item if isinstance(item, PolicyOutput) else PolicyOutput(text=item)

    @classmethod
    def from_texts(cls, scenario: str, task_idx: int, texts: list[str | PolicyOutput],
                   name: str = "scripted") -> ScriptedPolicy:
        return cls({(scenario, task_idx): list(texts)}, name=name)

    @classmethod
    def from_solutions(cls, paths: list[Path] | Path, name: str = "reference") -> ScriptedPolicy:
        """Reference solutions `{"scenario", "tasks": [{"task_idx", "calls": [{"tool", "arguments"}],
        "final_answer"}]}` as Qwen3 turns: list_tools, one call_tool per call, then the answer."""
        scripts: dict[tuple[str, int], list[str]] = {}
        for path in [paths] if isinstance(paths, Path) else paths:
            try:
                doc = json.loads(Path(path).read_text(encoding="utf-8"))
                scenario = doc["scenario"]
                for task in doc["tasks"]:
                    scripts[(scenario, int(task["task_idx"]))] = solution_turns(task["calls"], task.get("final_answer"))
            except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
                raise PolicyError(f"reference solution {path} is unreadable: {type(exc).__name__}: {exc}") from exc
        return cls(scripts, name=name)


def solution_turns(calls: list[dict[str, Any]], final_answer: str | None) -> list[str]:
    """The Qwen3 turns that replay a tool-call sequence, with reasoning in every turn."""
    turns = [list_tools_turn()]
    for i, call in enumerate(calls, 1):
        reasoning = f"Step {i} of {len(calls)}: call {call['tool']} with the values the task gives."
        turns.append(call_tool_turn(reasoning, call["tool"], call.get("arguments") or {}))
    turns.append(render_turn("All required changes are made; I can report the result.", None,
                             final_answer or "The task is complete."))
    return turns


# ----------------------------------------------------------------------------------------- chat APIs
class ChatModelPolicy:
    """A litellm chat model via LLMClient (API, or a vLLM/OpenAI-compatible server via api_base).

    `tool_calling`: "text" shows the meta-tools in the system prompt and reads `<tool_call>` from the answer (the
    Qwen3 format every policy speaks); "native" sends them through the provider's function-calling API, tool
    results as `tool` messages, and records the calls in the same Qwen3 form. `reasoning`: the format rule for
    `<think>` (None: "optional" for models whose provider hides the reasoning, else "required")."""

    def __init__(self, client: Any, *, stage: str = "rollout", max_tokens: int = 2048,
                 temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                 reasoning: str | None = None, tool_calling: str = "text") -> None:
        self.client = client
        self.stage = stage
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p, self.top_k = top_p, top_k
        if tool_calling not in TOOL_CALLING_MODES:
            raise ValueError(f"tool_calling must be one of {TOOL_CALLING_MODES}, not {tool_calling!r}")
        self.tool_calling = tool_calling
        self.reasoning = check_reasoning_rule(reasoning) if reasoning else default_reasoning_rule(self._model())
        self.name = f"chat:{client.model}" + (":native" if tool_calling == "native" else "")

    def _model(self) -> str:
        return self.client.model_for(self.stage) if hasattr(self.client, "model_for") else self.client.model

    def _sampling(self) -> dict[str, Any]:
        """top_p / top_k where the provider takes them (litellm's model information), else left out."""
        from awm_resources.llm import REPLAY_MODEL, model_profile

        model = self._model()
        supported = model_profile(model).supported_params if model != REPLAY_MODEL else frozenset()
        out: dict[str, Any] = {k: v for k, v in (("top_p", self.top_p), ("top_k", self.top_k))
                               if v is not None and k in supported}
        if self.top_k and "top_k" not in supported and model.startswith("hosted_vllm/"):
            out["extra_body"] = {"top_k": self.top_k}  # vLLM's server takes top_k beyond the OpenAI protocol
        return out

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        from awm_resources.llm import CallTag, LLMConfigError, LLMError

        params: dict[str, Any] = {"max_tokens": self.max_tokens, **self._sampling()}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.tool_calling == "native":
            messages, params["tools"] = as_native_messages(request.messages), META_TOOLS
        else:
            messages = as_chat_api_messages(request.messages)
        tag = CallTag(stage=self.stage, scenario=request.scenario, item=f"t{request.task_idx}.turn{request.turn}")
        try:
            # A turn cut at the limit is the agent's (the format check scores it), not a policy failure.
            response = self.client.chat(messages, tag=tag, truncation="return", **params)
        except LLMConfigError as exc:
            raise PolicyConfigError(str(exc)) from exc
        except LLMError as exc:
            raise PolicyError(str(exc)) from exc
        text = render_native_turn(response.text, response.tool_calls) if response.tool_calls else response.text
        truncated = response.finish_reason == "length" or (
            response.finish_reason is None and response.completion_tokens >= self.max_tokens and not response.tokens_estimated)
        return PolicyOutput(
            text=with_reasoning(text, response.reasoning), finish_reason="length" if truncated else "stop",
            prompt_tokens=response.prompt_tokens, completion_tokens=response.completion_tokens,
            cost_usd=response.cost_usd, latency_ms=response.latency_ms,
        )


def check_reasoning_rule(rule: str) -> str:
    if rule not in REASONING_RULES:
        raise ValueError(f"the reasoning rule must be one of {REASONING_RULES}, not {rule!r}")
    return rule


def default_reasoning_rule(model: str) -> str:
    """"optional" for models whose provider never returns their reasoning (OpenAI's reasoning models: gpt-5,
    o-series), "required" (the paper's rule) for every other model, which can write or return it."""
    from awm_resources.llm import REPLAY_MODEL, model_profile

    return "optional" if model != REPLAY_MODEL and model_profile(model).always_reasons else "required"


# ----------------------------------------------------------------------------------------- local HF
class TransformersPolicy:
    """A local causal LM; prompts rendered by its chat template with the meta-tools.

    Generation is serialised with a lock (one model, many episode threads).
    """

    reasoning = "required"
    tool_calling = "text"

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 512, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, name: str = "transformers", seed: int | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("TransformersPolicy needs a tokenizer with a chat template (Qwen3 format)")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p, self.top_k = top_p, top_k
        self.name = name
        self.seed = seed
        self._lock = threading.Lock()
        from awm_resources.settings import load_settings

        if threads := load_settings().cluster.torch_threads:  # AWM_TORCH_THREADS: cores shared with others
            import torch

            torch.set_num_threads(threads)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> TransformersPolicy:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path))
        model.eval()
        return cls(model, tokenizer, name=f"transformers:{path}", **kwargs)

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        import torch

        started = time.perf_counter()
        prompt = self.tokenizer.apply_chat_template(
            request.messages, tools=META_TOOLS, add_generation_prompt=True, tokenize=False
        )
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        eos = [t for t in {self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")}
               if isinstance(t, int) and t >= 0]
        with self._lock, torch.no_grad():
            if self.seed is not None:
                torch.manual_seed(self.seed + request.turn)
            output = self.model.generate(
                **inputs.to(self.model.device),
                max_new_tokens=self.max_new_tokens,
                do_sample=self.temperature > 0,
                temperature=self.temperature if self.temperature > 0 else None,
                top_k=self.top_k if self.temperature > 0 else None,
                top_p=self.top_p if self.temperature > 0 else None,
                eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0],
            )
        new_tokens = output[0, inputs["input_ids"].shape[1]:].tolist()
        finished = bool(new_tokens) and new_tokens[-1] in eos
        text = self.tokenizer.decode([t for t in new_tokens if t not in eos], skip_special_tokens=False)
        return PolicyOutput(
            text=text, finish_reason="stop" if finished else "length",
            prompt_tokens=int(inputs["input_ids"].shape[1]), completion_tokens=len(new_tokens),
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )


# ----------------------------------------------------------------------------------------- vLLM
class VLLMPolicy:
    """vLLM in-process (`vllm.LLM.chat` with the meta-tools); needs `pip install .[gpu]` and a GPU."""

    reasoning = "required"
    tool_calling = "text"

    def __init__(self, model: str, *, max_new_tokens: int = 2048, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = -1, **llm_kwargs: Any) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise PolicyError("VLLMPolicy needs the 'vllm' package (pip install '.[gpu]' on a GPU machine)") from exc
        self.llm = LLM(model=model, **llm_kwargs)
        self.sampling = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                       top_k=top_k if top_k > 0 else -1)
        self.name = f"vllm:{model}"
        self._lock = threading.Lock()

    def generate(self, request: PolicyRequest) -> PolicyOutput:
        started = time.perf_counter()
        with self._lock:
            result = self.llm.chat([request.messages], self.sampling, tools=META_TOOLS, use_tqdm=False)[0]
        completion = result.outputs[0]
        return PolicyOutput(
            text=completion.text, finish_reason=completion.finish_reason,
            prompt_tokens=len(result.prompt_token_ids or []), completion_tokens=len(completion.token_ids),
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )


@dataclass
class PolicySpec:
    """A policy named on the command line / in asset config; see `make_policy`."""

    kind: str
    target: str = ""
    options: dict[str, Any] = field(default_factory=dict)


def parse_policy_spec(text: str) -> PolicySpec:
    """`reference`, `chat:<litellm model>`, `transformers:<path>`, `tiny`, `vllm:<model>`."""
    kind, _, target = text.partition(":")
    if kind not in ("reference", "chat", "transformers", "tiny", "vllm"):
        raise ValueError(
            f"unknown policy {text!r}: use reference, chat:<litellm model>, transformers:<path>, tiny or vllm:<model>"
        )
    if kind in ("chat", "transformers", "vllm") and not target:
        raise ValueError(f"policy {text!r} needs a target after '{kind}:'")
    return PolicySpec(kind=kind, target=target)


def make_policy(spec: PolicySpec | str, *, solutions_dir: Path | None = None, api_base: str | None = None,
                api_key: str | None = None, max_new_tokens: int = 2048, temperature: float = 1.0,
                top_p: float = 1.0, top_k: int = 0, cache_dir: Path | None = None, reasoning: str | None = None,
                tool_calling: str = "text") -> Policy:
    """Build a policy from its spec string; `top_k` 0 means no top-k cut. A chat policy's API base and key default
    to AWM_POLICY_API_BASE / AWM_POLICY_API_KEY (else the provider's own variable); `reasoning` overrides the
    policy's reasoning rule; `tool_calling="native"` is for chat policies only."""
    if isinstance(spec, str):
        spec = parse_policy_spec(spec)
    if reasoning is not None:
        check_reasoning_rule(reasoning)
    if tool_calling != "text" and spec.kind != "chat":
        raise ValueError(f"tool_calling={tool_calling!r} needs a chat:<model> policy (the provider's function "
                         f"calling); {spec.kind} policies speak the Qwen3 text format")
    if (api_base or api_key) and spec.kind != "chat":
        raise ValueError(f"an API base or key applies to chat:<model> policies; a {spec.kind} policy would ignore it")
    policy = _build_policy(spec, solutions_dir=solutions_dir, api_base=api_base, api_key=api_key,
                           max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                           cache_dir=cache_dir, reasoning=reasoning, tool_calling=tool_calling)
    if reasoning is not None:
        policy.reasoning = reasoning  # type: ignore[attr-defined]  # every policy class declares it
    return policy


def _build_policy(spec: PolicySpec, *, solutions_dir: Path | None, api_base: str | None, api_key: str | None,
                  max_new_tokens: int, temperature: float, top_p: float, top_k: int, cache_dir: Path | None,
                  reasoning: str | None, tool_calling: str) -> Policy:
    if spec.kind == "reference":
        folder = solutions_dir or Path(__file__).resolve().parents[2] / "seeds" / "solutions"
        paths = sorted(Path(folder).glob("*.json"))
        if not paths:
            raise PolicyError(f"no reference solutions in {folder}")
        return ScriptedPolicy.from_solutions(paths)
    if spec.kind == "chat":
        from awm_resources.llm import LLMClient
        from awm_resources.settings import load_settings

        settings = load_settings().evaluation
        client = LLMClient(spec.target, api_base=api_base or settings.policy_api_base,
                           api_key=api_key or settings.policy_api_key, temperature=temperature,
                           max_tokens=max_new_tokens, key_hint="--api-key or AWM_POLICY_API_KEY")
        return ChatModelPolicy(client, max_tokens=max_new_tokens, top_p=top_p if top_p < 1.0 else None,
                               top_k=top_k or None, reasoning=reasoning, tool_calling=tool_calling)
    if spec.kind == "transformers":
        return TransformersPolicy.from_pretrained(spec.target, max_new_tokens=max_new_tokens, temperature=temperature,
                                                  top_p=top_p, top_k=top_k)
    if spec.kind == "tiny":
        from awm_rl.agent.tiny_model import build_tiny_qwen3

        model, tokenizer = build_tiny_qwen3(cache_dir)
        return TransformersPolicy(model, tokenizer, max_new_tokens=min(max_new_tokens, 128),
                                  temperature=temperature, top_p=top_p, top_k=top_k, name="tiny", seed=0)
    return VLLMPolicy(spec.target, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k)


def add_policy_options(parser: Any, *, default_policy: str | None = "reference") -> None:
    """`--policy` and the chat options (argparse) of a command that runs one of `make_policy`'s policies."""
    parser.add_argument("--policy", default=default_policy, required=default_policy is None,
                        help="reference | chat:<litellm model> | transformers:<path> | tiny | vllm:<model>"
                        + (f" (default {default_policy})" if default_policy else ""))
    add_chat_options(parser)


def add_chat_options(parser: Any) -> None:
    """The options of a chat policy every command that runs a policy shares (argparse): endpoint, key, the
    reasoning rule and the tool-calling mode."""
    parser.add_argument("--api-base", default=None, help="API base of a chat policy, e.g. a vLLM server for "
                        "chat:hosted_vllm/<model> (default $AWM_POLICY_API_BASE)")
    parser.add_argument("--api-key", default=None, help="API key of a chat policy's provider (default "
                        "$AWM_POLICY_API_KEY, else the provider's own variable such as OPENAI_API_KEY)")
    parser.add_argument("--reasoning", choices=REASONING_RULES, default=None,
                        help="the <think> format rule: required (the paper's; default) or optional (for models whose "
                        "provider hides the reasoning; the default for OpenAI reasoning models)")
    parser.add_argument("--tool-calling", choices=TOOL_CALLING_MODES, default="text",
                        help="text: Qwen3 <tool_call> text (default); native: the provider's function calling "
                        "(chat policies), recorded in the same Qwen3 form")


def policy_options(args: Any) -> dict[str, Any]:
    """The keyword arguments of `make_policy` from the options of `add_policy_options`."""
    return {"api_base": args.api_base, "api_key": args.api_key, "reasoning": args.reasoning,
            "tool_calling": args.tool_calling}
