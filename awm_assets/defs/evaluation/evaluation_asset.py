"""`evaluation` asset: run a policy over the environment catalog and record pass rates (thin; see
awm_rl.evaluation). Needs the `store` and `judge_llm` resources (the judge LLM is configured
apart from the synthesis LLM; `replay`/code mode works offline). No `from __future__ import
annotations` here: Dagster resolves the config and resource annotations at definition time."""

import time

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.resources import LLMResource, StoreResource
from awm_assets.defs.shared.ui_tables import asset_link, bucket_order, records_table
from awm_resources.difficulty import BUCKETS


class EvaluationConfig(dg.Config):
    policy: str = Field(default="reference", description="reference | chat:<litellm model> | transformers:<path> | tiny | vllm:<model>")
    policy_api_base: str | None = Field(default=None, description="API base for chat:hosted_vllm/... policies")
    judge_mode: str = Field(default="code", description="code (verifier only, offline) | llm | sql")
    tasks_per_env: int = Field(default=3, description="tasks evaluated per environment")
    window: int = Field(default=10, description="history window w (-1: full history)")
    max_turns: int = 20
    concurrency: int = 4
    # The paper's evaluation decoding (Qwen3's recommended thinking-mode sampling).
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = Field(default=20, description="0: no top-k cut")
    max_new_tokens: int = 2048


@dg.asset(
    deps=["environment_catalog"],
    group_name="evaluation",
    kinds={"python"},
    description="Pass rate of a policy over the catalog: overall, per environment and per difficulty bucket; per "
                "task its outcome and the policy's pass-rate bucket over every recorded run (per-task difficulty).",
)
def evaluation(context: dg.AssetExecutionContext, config: EvaluationConfig, store: StoreResource,
               judge_llm: LLMResource) -> dg.MaterializeResult:
    from awm_rl.agent import make_policy
    from awm_rl.evaluation import evaluate
    from awm_rl.reward import Judge
    from awm_rl.runtime.pool import EnvironmentPool

    st = store.get_store()
    policy = make_policy(config.policy, api_base=config.policy_api_base, temperature=config.temperature,
                         top_p=config.top_p, top_k=config.top_k, max_new_tokens=config.max_new_tokens)
    judge = Judge(config.judge_mode, llm=judge_llm.get_client() if config.judge_mode != "code" else None)  # type: ignore[arg-type]
    out_dir = st.root / "evaluations" / f"{time.strftime('%Y%m%d-%H%M%S')}-{context.run.run_id[:8]}"
    with EnvironmentPool(st.root) as pool:
        isolation = pool.isolation()
        report = evaluate(st, pool, policy, judge, out_dir=out_dir, tasks_per_env=config.tasks_per_env,
                          window=None if config.window < 0 else config.window, max_turns=config.max_turns,
                          concurrency=config.concurrency)
    context.log.info(f"{report.episodes} episodes, pass rate {report.pass_rate:.1%}")
    env_rows = ["| environment | episodes | pass rate | format errors | env errors | mean turns |", "|---|---|---|---|---|---|"]
    env_rows += [f"| {asset_link('verifiers', k)} | {v['episodes']} | {v['pass_rate']:.0%} | {v['format_error_rate']:.0%} | "
                 f"{v['environment_error_rate']:.0%} | {v['mean_turns']} |" for k, v in report.per_environment.items()]
    buckets = [{"tool calls required": name, **report.per_bucket[name]} for name in sorted(report.per_bucket, key=bucket_order)]
    return dg.MaterializeResult(metadata={
        "policy": policy.name, "judge_mode": config.judge_mode, "episodes": report.episodes,
        "os_isolation": isolation,
        "pass_rate": report.pass_rate, "mean_reward": report.mean_reward,
        "format_error_rate": report.format_error_rate, "environment_error_rate": report.environment_error_rate,
        "mean_turns": report.mean_turns, "judge_cost_usd": report.judge_cost_usd, "wall_s": report.wall_s,
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
