"""`bfcl_evaluation` asset: a policy on one BFCL category (partition), through our agent loop, scored
by BFCL's own multi-turn checker (thin; see awm_rl.bfcl). After `grpo_training` in lineage: with
`policy: grpo_latest` it evaluates the newest trained model (transformers; `vllm:grpo_latest` on a
GPU). Records accuracy, cases, a table with the paper's Table 4 reference rows, the plot (a PNG
file, linked by path) and the folder of per-case trajectories. No `from __future__ import
annotations` here: Dagster resolves the config and resource annotations at definition time."""

import re
from pathlib import Path

import dagster as dg
from pydantic import Field

from awm_assets.partitions import bfcl_category_partitions
from awm_assets.ui_tables import records_table
from awm_assets.resources import StoreResource


class BFCLEvaluationConfig(dg.Config):
    policy: str = Field(default="ground_truth", description="ground_truth | tiny | chat:<litellm model> | "
                        "transformers:<path> | vllm:<model> | grpo_latest (newest grpo_training model) | vllm:grpo_latest")
    limit: int = Field(default=0, description="first N cases of the category (0: all 200)")
    policy_api_base: str | None = Field(default=None, description="API base for chat:hosted_vllm/... policies")
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


def results_table(category: str, policy: str, accuracy: float, cases: int) -> str:
    from awm_rl.bfcl import PAPER_TABLE4

    rows = ["| model | setting | BFCL accuracy (%) |", "|---|---|---|",
            f"| {policy} | this run: {category}, {cases} case(s) | {100 * accuracy:.2f} |"]
    for model, (before, after) in PAPER_TABLE4.items():
        rows.append(f"| {model} (paper, Table 4) | base, BFCLv3 overall | {before:.2f} |")
        rows.append(f"| {model} (paper, Table 4) | + AWM training, BFCLv3 overall | {after:.2f} |")
    return "\n".join(rows)


@dg.asset(
    deps=["grpo_training"],
    partitions_def=bfcl_category_partitions,
    group_name="evaluation",
    kinds={"python"},
    description="BFCL multi-turn accuracy of a policy (per category), run through the AWM agent loop and scored "
                "by BFCL's own checker (bfcl-eval's data, backends and multi_turn_checker).",
)
def bfcl_evaluation(context: dg.AssetExecutionContext, config: BFCLEvaluationConfig,
                    store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.agent.policies import PolicyError
    from awm_rl.bfcl import BFCLPolicyError, BFCLUnavailable, evaluate_bfcl

    category = context.partition_key
    st = store.get_store()
    grpo_model = _latest_trained_model(context) if config.policy in ("grpo_latest", "vllm:grpo_latest") else None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", config.policy).strip("_")[:60] or "policy"
    out_dir = st.root / "bfcl" / category / f"{slug}-{context.run.run_id[:8]}"
    try:
        report = evaluate_bfcl(category, config.policy, out_dir=out_dir, limit=config.limit or None,
                               concurrency=config.concurrency, max_steps_per_turn=config.max_steps_per_turn or None,
                               store_root=st.root, grpo_model=grpo_model, api_base=config.policy_api_base,
                               temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    except (BFCLUnavailable, BFCLPolicyError, PolicyError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log.info(f"{category}: {report.policy} {report.accuracy:.1%} of {report.cases} case(s) in {report.wall_s:.1f}s")
    metadata = {
        "category": category, "policy": report.policy, "accuracy": report.accuracy, "cases": report.cases,
        "correct": sum(c["valid"] for c in report.per_case), "wall_s": report.wall_s,
        "error_types": records_table([{"error type": k, "cases": v} for k, v in
                                      sorted(report.error_types.items(), key=lambda kv: -kv[1])], ["error type", "cases"]),
        "results": dg.MetadataValue.md(results_table(category, report.policy, report.accuracy, report.cases)),
        "trajectories": dg.MetadataValue.path(str(Path(report.out_dir) / "cases")),
        "report": dg.MetadataValue.path(str(Path(report.out_dir) / "report.json")),
    }
    if report.plot:
        metadata["plot"] = dg.MetadataValue.path(report.plot)
    return dg.MaterializeResult(metadata=metadata)
