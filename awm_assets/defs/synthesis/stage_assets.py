"""The six per-scenario synthesis assets. Thin: each runs one attempt of a plain stage object
(`synthesis.stages`) through the self-correction runner and records metadata and checks.

Self-correction is Dagster's RetryPolicy: a failed attempt raises, the step is retried, and the next
attempt's prompt carries the error summaries stored in the artifact store. Errors in our own code are
raised as non-retryable failures so that they never burn LLM retries.
"""


import traceback

import dagster as dg

from awm_assets.defs.shared.partitions import scenario_partitions
from awm_assets.defs.shared.resources import LLMResource, StoreResource, SynthesisSettings, max_retries
from awm_assets.synthesis import previews
from awm_assets.synthesis.checks import quality_check, structural_check
from awm_assets.synthesis.runner import AttemptContext, AttemptFailed, StageExhausted, run_attempt
from awm_assets.synthesis.stages import build_stage
from awm_resources.llm import LLMConfigError, ReplayMissingError
from awm_resources.store import PIPELINE_STAGES
from awm_rl.isolation.sandbox import isolation_summary

GROUP = "synthesis"
DESCRIPTIONS = {
    "tasks": "10 API-solvable, post-authentication, concrete user tasks per scenario.",
    "db_schema": "SQLite schema inferred from the tasks; accepted at <= 10% failing tables.",
    "sample_data": "INSERTs making every task feasible, and initial.db; accepted at <= 10% failing statements.",
    "api_spec": "Minimal endpoint set for the tasks (operation_id = tool name).",
    "env_code": "FastAPI + SQLAlchemy server over the database; must import and serve every spec operation.",
    "verifiers": "Per-task verifiers (sql evidence + code verdict), each run on the unchanged database.",
}

KINDS = {"tasks": "json", "db_schema": "sqlite", "sample_data": "sqlite", "api_spec": "json", "env_code": "python",
         "verifiers": "python"}


def valid_check_name(stage: str) -> str:
    return f"{stage}_valid"


def quality_check_name(stage: str) -> str:
    return f"{stage}_quality"


# Stages whose checks run generated Python (the env check, the verifiers): their metadata says how it was contained.
RUNS_GENERATED_CODE = ("env_code", "verifiers")


def _metadata(store, key: str, stage: str, outcome, usage: dict, model: str) -> dict:
    meta = {k: v for k, v in outcome.metadata.items() if isinstance(v, (int, float, str, bool))}
    return {
        **meta,
        "attempts": outcome.attempts,
        "corrected": outcome.attempts > 1 and not outcome.degraded,
        "degraded": outcome.degraded,
        "error_rate": float(outcome.error_rate),
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "cost_usd": float(usage["cost_usd"]),
        "llm_model": model,
        "preview": dg.MetadataValue.md(previews.preview(store, key, stage)),
        "attempt_history": dg.MetadataValue.md(previews.attempt_history(outcome.history)),
        "last_prompt": dg.MetadataValue.md(previews.last_prompt(outcome.history)),
        "attempt_records": dg.MetadataValue.path(str(store.attempts_dir(key, stage))),
        **({"os_isolation": isolation_summary()} if stage in RUNS_GENERATED_CODE else {}),
    }


def _report_failure(context: dg.AssetExecutionContext, stage: str, key: str, attempt: int, reason: str) -> None:
    """The reason a stage gave up, on the scenario's own partition page (an observation), not only in the run.
    Reported to the instance directly: events a failing step logs through its context are dropped with it."""
    context.instance.report_runless_asset_event(dg.AssetObservation(
        asset_key=stage, partition=key, description=f"failed: {reason[:300]}",
        metadata={"failed_attempt": attempt, "run_id": context.run.run_id,
                  "failure": dg.MetadataValue.md(previews.fenced(reason, limit=6000))}))


def build_stage_asset(stage: str, upstream: str | None, retries: int) -> dg.AssetsDefinition:
    deps = [upstream] if upstream else []
    if upstream is None:
        deps = [dg.AssetDep("scenario_generation", partition_mapping=dg.AllPartitionMapping())]

    @dg.asset(
        name=stage,
        partitions_def=scenario_partitions,
        deps=deps,
        group_name=GROUP,
        pool="llm_api",
        kinds={KINDS[stage]},
        retry_policy=dg.RetryPolicy(max_retries=retries),
        description=DESCRIPTIONS[stage],
        check_specs=[
            # Partitioned like the asset, so that each scenario's page shows its own check results.
            dg.AssetCheckSpec(valid_check_name(stage), asset=stage, blocking=True, partitions_def=scenario_partitions,
                              description="structural validity (blocks downstream stages)"),
            dg.AssetCheckSpec(quality_check_name(stage), asset=stage, partitions_def=scenario_partitions,
                              description="quality warnings"),
        ],
    )
    def _stage_asset(context: dg.AssetExecutionContext, llm: LLMResource, store: StoreResource,
                     synthesis: SynthesisSettings) -> dg.MaterializeResult:
        key = context.partition_key
        st = store.get_store()
        client = llm.get_client()
        attempt = context.retry_number + 1
        if attempt == 1:
            st.clear_attempts(key, stage)
        settings = synthesis.config()
        spec = build_stage(stage, settings)
        ctx = AttemptContext(store=st, llm=client, scenario=key, attempt=attempt, max_attempts=retries + 1,
                             previous=st.list_attempts(key, stage), settings=settings)
        try:
            outcome = run_attempt(spec, ctx, context.log.info)
        except AttemptFailed as exc:
            context.log.warning(str(exc))
            raise
        except (ReplayMissingError, LLMConfigError, StageExhausted, FileNotFoundError) as exc:
            _report_failure(context, stage, key, attempt, f"{type(exc).__name__}: {exc}")
            raise dg.Failure(description=f"{stage} for {key!r}: {exc}", allow_retries=False) from exc
        except Exception as exc:  # our own bug: fail loudly, do not spend LLM retries on it
            _report_failure(context, stage, key, attempt, f"internal error (not retried): {type(exc).__name__}: {exc}")
            raise dg.Failure(description=f"internal error in stage {stage} for {key!r} (not retried): "
                                         f"{type(exc).__name__}: {exc}",
                             metadata={"traceback": dg.MetadataValue.text(traceback.format_exc())},
                             allow_retries=False) from exc
        usage = client.usage(stage=stage, scenario=key)
        meta = {**outcome.metadata, "degraded": outcome.degraded}
        valid = structural_check(st, key, stage, meta)
        quality = quality_check(stage, meta, outcome.degraded, outcome.attempts)
        st.write_stage_status(key, stage, {"source": "synthesized", "attempts": outcome.attempts,
                                           "error_rate": outcome.error_rate, "degraded": outcome.degraded,
                                           "valid": valid.passed, "quality_ok": quality.passed,
                                           **{k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}})
        return dg.MaterializeResult(
            metadata=_metadata(st, key, stage, outcome, usage, client.model_for(stage)),
            check_results=[
                dg.AssetCheckResult(check_name=valid_check_name(stage), passed=valid.passed,
                                    description=valid.description, metadata=valid.metadata),
                dg.AssetCheckResult(check_name=quality_check_name(stage), passed=quality.passed,
                                    severity=dg.AssetCheckSeverity.WARN, description=quality.description,
                                    metadata=quality.metadata),
            ],
        )

    return _stage_asset


def build_stage_assets(retries: int | None = None) -> list[dg.AssetsDefinition]:
    """All six stage assets chained in order, each retried `retries` times (default: AWM_MAX_RETRIES or 5)."""
    retries = max_retries() if retries is None else retries
    assets, upstream = [], None
    for stage in PIPELINE_STAGES:
        assets.append(build_stage_asset(stage, upstream, retries))
        upstream = stage
    return assets
