"""The quality gate in Dagster: a per-scenario asset check on `verifiers` and the batch's `environment_quality`.

Thin: the check calls `awm_rl.quality.gate`, which stores each scenario's result keyed by the digest of
what it checked; the asset goes through the catalog's index (`synthesis.catalog.assemble_catalog`), so a
refresh re-reads and re-checks only scenarios whose files changed.
"""

import json

import dagster as dg

from awm_assets.defs.catalog.automation import catalog_refresh_condition, every_stage_partition
from awm_assets.defs.shared.partitions import scenario_partitions
from awm_assets.defs.shared.resources import LLMResource, StoreResource
from awm_assets.synthesis.catalog import QUALITY_SUMMARY_FILE, assemble_catalog
from awm_assets.synthesis.catalog_index import mark_written, run_token
from awm_resources.llm import REPLAY_MODEL
from awm_resources.store import atomic_write_text


def gate_judge(judge_llm: LLMResource):
    """The sql-mode rollout judge when a real judge model is configured (AWM_JUDGE_MODEL): reference
    solutions must then also be judged Completed. Offline (replay) the code-mode verifier decides alone."""
    if judge_llm.model in ("", REPLAY_MODEL):
        return None
    from awm_rl.reward.judge import Judge  # the agent loop and its validator: imported only with a judge

    return Judge("sql", llm=judge_llm.get_client())


def _tool_rows(result: dict) -> str:
    rows = ["| tool | status | calls | first error |", "|---|---|---|---|"]
    for name, tool in sorted(result.get("tools", {}).items(), key=lambda kv: (kv[1]["status"] == "ok", kv[0])):
        err = tool["errors"][0] if tool.get("errors") and tool["status"] != "ok" else None
        first = (f"HTTP {err['status_code']}: {str(err['error']).splitlines()[0][:120]}" if err and err.get("error")
                 else tool.get("note", ""))
        rows.append(f"| {name} | {tool['status']} | {tool['calls']} | {first.replace('|', '/')} |")
    return "\n".join(rows)


def _task_rows(result: dict) -> str:
    rows = ["| task | eligible | verdict | solvable | reason |", "|---|---|---|---|---|"]
    rows += [f"| {t['task_idx']} | {'yes' if t['eligible'] else 'no'} | {t['verdict']} | {t.get('solvable', '')} | "
             f"{(t['reason'] or t.get('solution_detail', ''))[:200].replace('|', '/')} |" for t in result.get("tasks", [])]
    return "\n".join(rows)


@dg.asset_check(asset="verifiers", name="environment_quality_gate", partitions_def=scenario_partitions,
                description="Every tool probed with database-grounded and edge inputs; every task checked (do-nothing "
                            "audit, write coverage, reference solution, determinism). Fails when a tool answers 5xx "
                            "on valid input or no task is eligible.")
def environment_quality_gate(context: dg.AssetCheckExecutionContext, store: StoreResource,
                             judge_llm: LLMResource) -> dg.AssetCheckResult:
    from awm_rl.quality.gate import quality

    st = store.get_store()
    key = context.partition_key
    result = quality(st, [key], judge=gate_judge(judge_llm))["scenarios"][0]
    passed = not result.get("error") and result["tools_server_error"] == 0 and result.get("eligible_tasks", 0) > 0
    description = (f"{result['tools_ok']}/{result['tools_total']} tools ok, {result['tools_server_error']} with 5xx on "
                   f"valid input; {result.get('eligible_tasks', 0)}/{len(result.get('tasks', []))} tasks eligible"
                   + (f"; {result['error']}" if result.get("error") else ""))
    return dg.AssetCheckResult(
        passed=passed, severity=dg.AssetCheckSeverity.WARN, description=description,
        metadata={**{k: result.get(k, 0) for k in ("tools_total", "tools_ok", "tools_server_error",
                                                   "tools_server_error_on_edge", "tools_client_error_only", "shadowed",
                                                   "eligible_tasks", "vacuous", "blocked", "unsolvable", "crash",
                                                   "nondeterministic")},
                  "tools": dg.MetadataValue.md(_tool_rows(result)), "tasks": dg.MetadataValue.md(_task_rows(result)),
                  "digest": result["digest"], "judge": result.get("judge") or "code verifier only"})


@dg.asset(
    deps=every_stage_partition(),
    automation_condition=catalog_refresh_condition(),
    group_name="catalog",
    kinds={"json"},
    description="The quality gate over every complete scenario, summed in the paper's terms: share of environments "
                "with bugs, bugs per environment, share of blocked tasks; per-task eligibility feeds the catalog.",
)
def environment_quality(context: dg.AssetExecutionContext, store: StoreResource,
                        judge_llm: LLMResource) -> dg.MaterializeResult:
    from awm_rl.quality.results import judge_label

    st = store.get_store()
    judge = gate_judge(judge_llm)
    report, _ = assemble_catalog(st, judge=judge, refresh_id=context.run.run_id)
    totals = report["totals"]
    # Each scenario's counts and task verdicts (its full result is its quality.json); json's C encoder.
    atomic_write_text(st.root / QUALITY_SUMMARY_FILE, json.dumps(report, ensure_ascii=False) + "\n")
    mark_written(st, QUALITY_SUMMARY_FILE, run_token(st, context.run.run_id), judge_label(judge))
    rows = ["| environment | tools | ok | 5xx valid | 5xx edge | client-errors-only | shadowed | eligible tasks | "
            "vacuous | blocked | unsolvable | crash | solvable |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows += [f"| {r['scenario']} | {r['tools_total']} | {r['tools_ok']} | {r['tools_server_error']} | "
             f"{r['tools_server_error_on_edge']} | {r['tools_client_error_only']} | {r['shadowed']} | "
             f"{r.get('eligible_tasks', 0)}/{len(r.get('tasks', []))} | {r['vacuous']} | {r['blocked']} | "
             f"{r['unsolvable']} | {r['crash']} | {sum(1 for t in r.get('tasks', []) if t.get('solvable') == 'yes')} |"
             for r in report["scenarios"]]
    context.log.info(f"{totals['environments_with_bugs']} of {totals['environments']} environments have bugs; "
                     f"{totals['tasks_eligible']} of {totals['tasks']} tasks eligible")
    return dg.MaterializeResult(metadata={
        **{k: v for k, v in totals.items() if isinstance(v, (int, float))},
        "environments": dg.MetadataValue.md("\n".join(rows)),
        "summary_file": dg.MetadataValue.path(str(st.root / QUALITY_SUMMARY_FILE)),
    })
