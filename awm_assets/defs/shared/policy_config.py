"""The chat-policy fields every evaluation asset's config shares: the endpoint, the reasoning rule and the
tool-calling mode (awm_rl.agent.policies.make_policy). The key is never run config (the UI shows config): it comes
from AWM_POLICY_API_KEY or the provider's own variable, read where the policy is built."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field


class ChatPolicyConfig(dg.Config):
    policy_api_base: str | None = Field(default=None, description="API base of a chat:<model> policy, e.g. a vLLM "
                                        "server for chat:hosted_vllm/... (default AWM_POLICY_API_BASE)")
    # Plain strings (Dagster config takes no Literal); make_policy names a wrong value.
    reasoning: str | None = Field(default=None, description="the <think> format rule: required (the paper's) or "
                                  "optional (models whose provider hides the reasoning); default: the policy's own")
    tool_calling: str = Field(default="text", description="text: Qwen3 <tool_call> text; native: the provider's "
                              "function calling (chat policies)")

    def chat_options(self) -> dict[str, Any]:
        """make_policy's keyword arguments for these fields."""
        return {"api_base": self.policy_api_base, "reasoning": self.reasoning, "tool_calling": self.tool_calling}
