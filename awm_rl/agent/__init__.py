"""The agent side of rollouts: Qwen3 wire format, format validator, policies and the episode loop."""

from awm_rl.agent.episode import Episode, EpisodeScore, JudgeVerdict, Step, ToolOutcome
from awm_rl.agent.loop import EpisodeSpec, LoopConfig, ToolEnvironments, run_episode, run_episodes, window_messages
from awm_rl.agent.policies import (
    ChatModelPolicy,
    Policy,
    PolicyError,
    PolicyOutput,
    PolicyRequest,
    ScriptedPolicy,
    TransformersPolicy,
    VLLMPolicy,
    make_policy,
    parse_policy_spec,
    solution_turns,
)
from awm_rl.agent.qwen3 import META_TOOLS, parse_response
from awm_rl.agent.validator import FormatValidator, StepCheck

__all__ = [
    "ChatModelPolicy", "Episode", "EpisodeScore", "EpisodeSpec", "FormatValidator", "JudgeVerdict", "LoopConfig",
    "META_TOOLS", "Policy", "PolicyError", "PolicyOutput", "PolicyRequest", "ScriptedPolicy", "Step", "StepCheck",
    "ToolEnvironments", "ToolOutcome", "TransformersPolicy", "VLLMPolicy", "make_policy", "parse_policy_spec",
    "parse_response", "run_episode", "run_episodes", "solution_turns", "window_messages",
]
