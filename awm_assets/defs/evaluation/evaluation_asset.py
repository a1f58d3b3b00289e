"""`evaluation` asset: run a policy over the environment catalog and record pass rates (thin; see
awm_rl.evaluation.catalog). Needs the `store` and `judge_llm` resources (the judge LLM is configured
apart from the synthesis LLM; `replay`/code mode works offline). No `from __future__ import
annotations` here: Dagster resolves the config and resource annotations at definition time."""

import time

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.policy_config import ChatPolicyConfig
from awm_assets.defs.shared.resources import LLMResource, StoreResource
from awm_assets.defs.shared.ui_tables import asset_link, bucket_order, records_table
from awm_resources.difficulty import BUCKETS

CATEGORY_FIELDS = ["tasks", "episodes", "pass_at_1", "pass_at_k", "mean_turns", "cost_usd"]


class EvaluationConfig(ChatPolicyConfig):
    """The options of `awm eval catalog` (awm_rl.evaluation.commands), for the same function; a chat policy's key
    comes from AWM_POLICY_API_KEY (or the provider's variable), never from run config, which the UI shows."""

    policy: str = Field(default="reference", description="reference | chat:<litellm model> | transformers:<path> | tiny | vllm:<model>")
    judge_mode: str = Field(default="code", description="code (verifier only, offline) | llm | sql")
    tasks_per_env: int | None = Field(default=3, description="tasks evaluated per environment (null: every eligible task)")
    k: int = Field(default=1, description="attempts per task; pass@k is reported for this k")
    seed: int | None = Field(default=None, description="sample tasks_per_env tasks per environment with this seed "
                                                         "(null: the first ones)")
    window: int = Field(default=10, description="history window w (-1: full history)")
    max_turns: int = 20
    concurrency: int = 4
    max_requests: int | None = Field(default=None, description="turns generated at once across all episodes (null: "
                                                               "bounded by concurrency only)")
    # The paper's evaluation decoding (Qwen3's recommended thinking-mode sampling).
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = Field(default=20, description="0: no top-k cut")
    max_new_tokens: int = 2048


@dg.asset(
    deps=["environment_catalog"],
    group_name="evaluation",
    kinds={"python"},
    description="pass@1 and pass@k of a policy over the catalog (as `awm eval catalog`): overall, per environment, per "
                "category and per difficulty bucket, with cost and failure reasons; per task its outcomes and the "
                "policy's pass-rate bucket over every recorded run (per-task difficulty).",
)
def evaluation(context: dg.AssetExecutionContext, config: EvaluationConfig, store: StoreResource,
               judge_llm: LLMResource) -> dg.MaterializeResult:
    from awm_rl.agent import make_policy
    from awm_rl.agent.policies import PolicyError
    from awm_rl.evaluation.catalog import evaluate
    from awm_rl.reward import Judge
    from awm_rl.runtime.pool import EnvironmentPool

    st = store.get_store()
    try:
        policy = make_policy(config.policy, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
                             max_new_tokens=config.max_new_tokens, **config.chat_options())
    except (ValueError, PolicyError) as exc:  # a wrong option or a policy that cannot be built: no retry helps
        raise dg.Failure(description=f"evaluation: {exc}", allow_retries=False) from exc
    judge = Judge(config.judge_mode, llm=judge_llm.get_client() if config.judge_mode != "code" else None)  # type: ignore[arg-type]
    out_dir = st.root / "evaluations" / f"{time.strftime('%Y%m%d-%H%M%S')}-{context.run.run_id[:8]}"
    with EnvironmentPool(st.root) as pool:
        isolation = pool.isolation()
        try:
            report = evaluate(st, pool, policy, judge, out_dir=out_dir, tasks_per_env=config.tasks_per_env, k=config.k,
                              seed=config.seed, window=None if config.window < 0 else config.window,
                              max_turns=config.max_turns, concurrency=config.concurrency,
                              max_requests=config.max_requests)
        except PolicyError as exc:  # PolicyConfigError: no key, refused key, unknown model; finished episodes kept
            raise dg.Failure(description=f"evaluation stopped: {exc} (finished episodes kept in {out_dir})",
                             allow_retries=False) from exc
    context.log.info(f"{report.episodes} episodes, pass@1 {report.pass_at_1:.1%}, pass@{report.k} {report.pass_at_k}")
    env_rows = [f"| environment | category | episodes | pass@1 | pass@{report.k} | format errors | env errors | mean turns "
                "| cost $ |", "|---|---|---|---|---|---|---|---|---|"]
    env_rows += [f"| {asset_link('verifiers', k)} | {v['category']} | {v['episodes']} | {v['pass_at_1']:.0%} | "
                 f"{v['pass_at_k']} | {v['format_error_rate']:.0%} | {v['environment_error_rate']:.0%} | "
                 f"{v['mean_turns']} | {v['cost_usd']} |" for k, v in report.per_environment.items()]
    buckets = [{"tool calls required": name, **report.per_bucket[name]} for name in sorted(report.per_bucket, key=bucket_order)]
    return dg.MaterializeResult(metadata={
        "policy": policy.name, "reasoning": getattr(policy, "reasoning", "required"),
        "tool_calling": getattr(policy, "tool_calling", "text"), "judge_mode": config.judge_mode,
        "episodes": report.episodes, "tasks": report.tasks, "k": report.k, "os_isolation": isolation,
        "pass_at_1": report.pass_at_1, "pass_at_k": report.pass_at_k if report.pass_at_k is not None else 0.0,
        "pass_rate": report.pass_rate, "mean_reward": report.mean_reward,
        "format_error_rate": report.format_error_rate, "environment_error_rate": report.environment_error_rate,
        "mean_turns": report.mean_turns, "prompt_tokens": report.prompt_tokens,
        "completion_tokens": report.completion_tokens, "cost_usd": report.cost_usd,
        "judge_cost_usd": report.judge_cost_usd, "wall_s": report.wall_s,
        "failure_reasons": records_table([{"reason": r, "episodes": n} for r, n in report.failure_reasons.items()],
                                         ["reason", "episodes"]),
        "per_category": records_table([{"category": c, **{f: g[f] for f in CATEGORY_FIELDS}}
                                       for c, g in report.per_category.items()], ["category", *CATEGORY_FIELDS]),
        "excluded_tasks": sum(len(v) for v in report.excluded_tasks.values()),
        "per_environment": dg.MetadataValue.md("\n".join(env_rows)),
        "per_bucket": records_table(buckets, ["tool calls required", "episodes", "pass_rate", "mean_reward",
                                              "format_error_rate", "environment_error_rate", "mean_turns"]),
        "pass_rate_by_bucket_plot": dg.MetadataValue.path(report.plot or ""),
        # Per-task difficulty: this run's outcome and the policy's record over every run (awm_resources.difficulty).
        "per_task": records_table(report.per_task[:1000], ["scenario", "task", "outcome", "turns", "bucket",
                                                            "pass_rate", "attempts", "mean_turns"]),
        "difficulty_buckets": records_table([{"bucket": k, "tasks": v, "meaning": BUCKETS[k]}
                                             for k, v in report.difficulty_buckets.items()], ["bucket", "tasks", "meaning"]),
        "task_difficulty_plot": dg.MetadataValue.path(report.difficulty_plot or ""),
        "difficulty_run": report.difficulty_run or "",
        "episodes_dir": dg.MetadataValue.path(str(out_dir / "episodes")),
        "report": dg.MetadataValue.path(str(out_dir / "report.json")),
        # Which catalog (the environment_catalog data version) and which environment versions were evaluated.
        "catalog_digest": report.catalog_digest or "none",
        "environment_versions": records_table([{"environment": k, "version": v} for k, v in report.environments.items()],
                                              ["environment", "version"]),
    })
