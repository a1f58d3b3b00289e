"""`repair_environment`: the quality gate's findings fixed by the configured LLM, one scenario partition per run.

Thin over `synthesis.repair.repair_scenario`. What a repair changes is reported as new materializations
of `env_code` / `verifiers` for the partition (source `repaired`, with the attempt history, attempt 0
being the stored artifact), so the scenario's page shows it like a synthesis attempt. `awm repair`
runs the same job in process (awm_assets/inprocess.py).
"""

from typing import Any

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.partitions import scenario_partitions
from awm_assets.defs.shared.resources import LLMResource, StoreResource, SynthesisSettings
from awm_assets.synthesis import previews
from awm_assets.synthesis.repair import PHASES, repair_scenario, repair_table

# Phase -> (asset it changes, attempt folder of its attempts).
REPAIRED_ASSETS = {"env_code": ("env_code", "env_code_repair"), "verifiers": ("verifiers", "verifiers_repair")}


class RepairConfig(dg.Config):
    attempts: int = Field(default=3, description="LLM attempts per phase after the stored artifact (attempt 0)")
    phases: list[str] = Field(default=list(PHASES), description="any of env_code, verifiers, solutions")
    tasks: list[int] = Field(default_factory=list, description="limit verifier and solution repair to these tasks")


def _phase_rows(report: dict[str, Any]) -> str:
    rows = ["| phase | needed | repaired | attempts | changed | note |", "|---|---|---|---|---|---|"]
    for phase, o in report["phases"].items():
        note = "; ".join(x for x in (
            str(o.get("error") or "")[:200],
            f"kept attempt {o['kept_attempt']}" if o.get("kept_attempt") and not o.get("repaired") else "",
            f"still wrong: {len(o['still_wrong'])} (first: {o['still_wrong'][0][:160]})" if o.get("still_wrong") else "",
            f"put back, it broke: {'; '.join(o['reverted'])[:300]}" if o.get("reverted") else "") if x)
        rows.append(f"| {phase} | {'yes' if o.get('needed') else 'no'} | {o.get('repaired', '')} | {o.get('attempts', '')} "
                    f"| {o.get('changed', '')} | {note.replace('|', '/').replace(chr(10), ' ')} |")
    return "\n".join(rows)


def _changed_assets(report: dict[str, Any]) -> list[tuple[str, tuple[str, str]]]:
    """(phase, (asset, attempt folder)) of each asset the repair changed; the solutions phase changes
    `verifiers` when it replaced a verifier from a diagnosis."""
    out = [(p, a) for p, a in REPAIRED_ASSETS.items() if report["phases"].get(p, {}).get("changed")]
    if (report["phases"].get("solutions", {}).get("metrics") or {}).get("verifiers_replaced"):
        out.append(("solutions", ("verifiers", "solutions")))
    return out


def _excluded_rows(st, key: str) -> str:
    """The tasks the quality gate still excludes after the repair, each with its reason (diagnosis first)."""
    quality = st.read_json(key, "quality.json") if st.has(key, "quality.json") else {}
    rows = ["| task | verdict | reason |", "|---|---|---|"]
    rows += [f"| {t['task_idx']} | {t['verdict']} | {t['reason'][:300].replace('|', '/').replace(chr(10), ' ')} |"
             for t in quality.get("tasks", []) if not t["eligible"]]
    return "\n".join(rows) if len(rows) > 2 else "none"


@dg.op(description="Probe and check the scenario, repair its env code, verifiers and reference solutions with "
                   "the LLM (the stored artifacts are attempt 0), and check again.")
def repair_scenario_op(context: dg.OpExecutionContext, config: RepairConfig, llm: LLMResource,
                       store: StoreResource, synthesis: SynthesisSettings) -> dict:
    unknown = sorted(set(config.phases) - set(PHASES))
    if unknown:
        raise dg.Failure(f"unknown repair phase(s) {unknown}; choose from {list(PHASES)}", allow_retries=False)
    st, key = store.get_store(), context.partition_key
    if not st.has(key, "server.py"):
        raise dg.Failure(f"scenario {key!r} has no stored env code (server.py) to repair", allow_retries=False)
    report = repair_scenario(st, llm.get_client(), key, max_attempts=config.attempts, phases=tuple(config.phases),
                             tasks=config.tasks or None, settings=synthesis.config(), log_fn=context.log.info)
    for phase, (asset, attempts_stage) in _changed_assets(report):
        outcome = report["phases"][phase]
        history = st.list_attempts(key, attempts_stage)
        context.log_event(dg.AssetMaterialization(
            asset_key=asset, partition=key, description=f"repaired by the LLM ({outcome['attempts']} attempt(s) after the stored one)",
            metadata={"source": "repaired", "attempts": outcome["attempts"], "error_rate_before": outcome["error_rate_before"],
                      "error_rate": outcome.get("error_rate", 1.0),
                      "attempt_history": dg.MetadataValue.md(previews.attempt_history(history)),
                      "preview": dg.MetadataValue.md(previews.preview(st, key, asset)),
                      "attempt_records": dg.MetadataValue.path(str(st.attempts_dir(key, attempts_stage)))}))
    if report.get("error"):
        raise dg.Failure(description=f"repair of {key!r} stopped: {report['error']}", allow_retries=False,
                         metadata={"phases": dg.MetadataValue.md(_phase_rows(report))})
    before, after = report["before"], report["after"]
    context.add_output_metadata({
        **{f"{k}_before": before[k] for k in ("tools_server_error", "eligible_tasks", "solvable_yes")},
        **{f"{k}_after": after[k] for k in ("tools_server_error", "eligible_tasks", "solvable_yes")},
        "phases": dg.MetadataValue.md(_phase_rows(report)),
        "summary": dg.MetadataValue.md(f"```\n{repair_table([report])}\n```"),
        "excluded_tasks": dg.MetadataValue.md(_excluded_rows(st, key)),
    })
    return report


@dg.job(partitions_def=scenario_partitions, executor_def=dg.in_process_executor,
        description="Repair one stored (e.g. imported) environment with the configured LLM: env code that answers "
                    "5xx on valid input, unusable verifiers, tasks without a proven reference solution.")
def repair_environment():
    repair_scenario_op()
