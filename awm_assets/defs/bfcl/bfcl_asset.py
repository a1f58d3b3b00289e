"""`bfcl_evaluation` asset: a policy on one BFCL category (partition) or on all of them (`all`, with
BFCL's overall), through our agent loop, scored by BFCL's own checkers (thin; see awm_rl.bfcl). After `grpo_training` in lineage: with
`policy: grpo_latest` it evaluates the newest trained model (transformers; `vllm:grpo_latest` on a
GPU). Records accuracy, cases, a table with the paper's Table 4 reference rows, the plot (a PNG
file, linked by path) and the folder of per-case trajectories. No `from __future__ import
annotations` here: Dagster resolves the config and resource annotations at definition time."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.policy_config import ChatPolicyConfig
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import records_table
from awm_resources.names import policy_slug

# BFCL categories the asset runs (bfcl-eval's bundled data: awm_rl.bfcl.data.ALL_CATEGORIES, BFCL v3's 17), and
# `all`: every one of them with BFCL's overall.
bfcl_category_partitions = dg.StaticPartitionsDefinition(
    ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance",
     "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance",
     "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context", "all"]
)


class BFCLEvaluationConfig(ChatPolicyConfig):
    policy: str = Field(default="ground_truth", description="ground_truth | tiny | chat:<litellm model> | "
                        "transformers:<path> | vllm:<model> | grpo_latest (newest grpo_training model) | vllm:grpo_latest")
    limit: int = Field(default=0, description="first N cases of each category (0: all)")
    temperature: float = Field(default=0.0, description="sampling temperature (BFCL uses 0)")
    max_new_tokens: int = 2048
    concurrency: int = 4
    max_steps_per_turn: int = Field(default=0, description="model turns with calls per user turn (0: twice BFCL's limit)")


def _latest_trained_model(context: dg.AssetExecutionContext) -> Path | None:
    event = context.instance.get_latest_materialization_event(dg.AssetKey("grpo_training"))
    materialization = event.asset_materialization if event else None
    if materialization is None:
        return None
    value = materialization.metadata.get("final_model")
    path = Path(getattr(value, "path", None) or getattr(value, "value", "") or "")
    return path if (path / "config.json").is_file() else None


def results_table(rows: list[tuple[str, float, int]], policy: str, overall: dict | None = None) -> str:
    """Our accuracies (category, accuracy, cases) and BFCL's overall beside the paper's Table 4 rows."""
    from awm_rl.bfcl import PAPER_TABLE4

    table = ["| model | setting | BFCL accuracy (%) |", "|---|---|---|"]
    for category, accuracy, cases in rows:
        table.append(f"| {policy} | this run: {category}, {cases} case(s) | {100 * accuracy:.2f} |")
    if overall and overall.get("overall") is not None:
        table.append(f"| {policy} | this run: BFCL overall (bfcl-eval's aggregation; agentic not run, counted 0) | "
                     f"{100 * overall['overall']:.2f} |")
        table.append(f"| {policy} | this run: BFCL overall without the agentic weight | "
                     f"{100 * overall['overall_without_agentic']:.2f} |")
    for model, (before, after) in PAPER_TABLE4.items():
        table.append(f"| {model} (paper, Table 4) | base, BFCLv3 overall | {before:.2f} |")
        table.append(f"| {model} (paper, Table 4) | + AWM training, BFCLv3 overall | {after:.2f} |")
    return "\n".join(table)


@dg.asset(
    deps=["grpo_training"],
    partitions_def=bfcl_category_partitions,
    group_name="evaluation",
    kinds={"python"},
    description="BFCL accuracy of a policy per category (or `all`: every BFCL v3 category and BFCL's overall), run "
                "through the AWM agent loop and scored by BFCL's own checkers and leaderboard aggregation (bfcl-eval).",
)
def bfcl_evaluation(context: dg.AssetExecutionContext, config: BFCLEvaluationConfig,
                    store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.agent.policies import PolicyError
    from awm_rl.bfcl import BFCLPolicyError, BFCLUnavailable, evaluate_suite, expand_categories

    partition = context.partition_key
    categories = expand_categories(partition)
    st = store.get_store()
    grpo_model = _latest_trained_model(context) if config.policy in ("grpo_latest", "vllm:grpo_latest") else None
    slug = policy_slug(config.policy, max_len=60)
    out_dir = st.root / "bfcl" / partition / f"{slug}-{context.run.run_id[:8]}"
    try:
        suite = evaluate_suite(categories, config.policy, out_dir=out_dir,
                               out_dirs={partition: out_dir} if partition != "all" else None,
                               limit=config.limit or None, concurrency=config.concurrency,
                               max_steps_per_turn=config.max_steps_per_turn or None, store_root=st.root,
                               grpo_model=grpo_model, temperature=config.temperature,
                               max_new_tokens=config.max_new_tokens, **config.chat_options())
    except (BFCLUnavailable, BFCLPolicyError, PolicyError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    reports = list(suite.reports.values())
    cases = sum(r.cases for r in reports)
    correct = sum(sum(c["valid"] for c in r.per_case) for r in reports)
    for r in reports:
        context.log.info(f"{r.category}: {r.policy} {r.accuracy:.1%} of {r.cases} case(s) in {r.wall_s:.1f}s")
    errors: dict[str, int] = {}
    for r in reports:
        for kind, n in r.error_types.items():
            errors[kind] = errors.get(kind, 0) + n
    accuracy = reports[0].accuracy if len(reports) == 1 else round(correct / cases, 4)
    metadata = {
        "category": partition, "policy": suite.policy, "accuracy": accuracy, "cases": cases, "correct": correct,
        "wall_s": suite.wall_s, "bfcl_eval_version": suite.bfcl_eval_version,
        "bfcl_overall": suite.overall.get("overall"),
        "error_types": records_table([{"error type": k, "cases": v} for k, v in
                                      sorted(errors.items(), key=lambda kv: -kv[1])], ["error type", "cases"]),
        "results": dg.MetadataValue.md(results_table([(r.category, r.accuracy, r.cases) for r in reports], suite.policy,
                                                     suite.overall if partition == "all" else None)),
        "trajectories": dg.MetadataValue.path(str(Path(reports[0].out_dir) / "cases") if len(reports) == 1 else str(out_dir)),
        "report": dg.MetadataValue.path(str(Path(suite.out_dir) / "suite.json")),
    }
    plot = suite.plot or reports[0].plot
    if plot:
        metadata["plot"] = dg.MetadataValue.path(plot)
    return dg.MaterializeResult(metadata=metadata)
