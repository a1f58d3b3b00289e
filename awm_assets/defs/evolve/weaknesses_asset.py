"""`weaknesses` asset: what the evaluated policy fails at, with evidence (thin; see awm_rl.evaluation.weaknesses).
No `from __future__ import annotations` here: Dagster resolves the config and resource annotations at
definition time."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import asset_link, records_table


class WeaknessesConfig(dg.Config):
    evaluation_dir: str = Field(default="", description="an evaluation run's output folder; default: the one the "
                                                        "latest `evaluation` materialization wrote, else the newest")
    top: int = Field(default=6, description="how many of the weakest groups the report leads with")
    min_failed: int = Field(default=1, description="a group with fewer failures is never a weakness")


def evaluation_dir_of(instance: dg.DagsterInstance, root: Path, configured: str) -> Path:
    """The evaluation run to analyze: configured, else the latest `evaluation` materialization's, else the newest."""
    if configured:
        return Path(configured)
    event = instance.get_latest_materialization_event(dg.AssetKey("evaluation"))
    report = event.asset_materialization.metadata.get("report") if event and event.asset_materialization else None
    if report is not None and Path(str(report.value)).parent.is_dir():
        return Path(str(report.value)).parent
    runs = sorted(p.parent for p in (root / "evaluations").glob("*/report.json"))
    if not runs:
        raise dg.Failure(description=f"no evaluation run to analyze: materialize `evaluation` first (none under "
                                     f"{root / 'evaluations'})", allow_retries=False)
    return runs[-1]


@dg.asset(
    deps=["evaluation"],
    group_name="evolve",
    kinds={"python"},
    description="What the evaluated policy fails at, with evidence: fail rates by scenario category, task kind "
                "(read / write / chain), tool kind (read / create / update / delete) and failure mode (format rule, "
                "wrong tool, bad arguments, gave up, environment error), each with the failed episodes' files.",
)
def weaknesses(context: dg.AssetExecutionContext, config: WeaknessesConfig, store: StoreResource) -> dg.MaterializeResult:
    from awm_rl.evaluation.weaknesses import analyze, write_report

    st = store.get_store()
    folder = evaluation_dir_of(context.instance, st.root, config.evaluation_dir)
    try:
        report = analyze(st, folder, top=config.top, min_failed=config.min_failed)
    except (FileNotFoundError, ValueError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    path, plot = write_report(st, report)
    context.log.info(f"{report.failed} of {report.episodes} episodes failed; weakest: "
                     + ", ".join(f"{w.dimension}={w.key} ({w.fail_rate:.0%})" for w in report.weaknesses))
    rows = [{"dimension": g.dimension, "group": g.key, "episodes": g.episodes, "failed": g.failed,
             "fail_rate": g.fail_rate, "modes": ", ".join(f"{m} {n}" for m, n in g.modes.items()),
             "evidence": "; ".join(f"{e['scenario']} t{e['task_idx']}" for e in g.examples)} for g in report.groups]
    evidence = ["| weakness | fail rate | failed tasks (mode: detail) |", "|---|---|---|"]
    evidence += [f"| {w.dimension} = {w.key} | {w.failed}/{w.episodes} ({w.fail_rate:.0%}) | " + "<br>".join(
        f"{asset_link('verifiers', e['scenario'], e['scenario'])} task {e['task_idx']} ({e['mode']}: "
        f"{str(e['detail'])[:100]}) `{Path(e['episode']).name}`".replace("|", "/") for e in w.examples) + " |"
        for w in report.weaknesses]
    return dg.MaterializeResult(metadata={
        "policy": report.policy or "", "episodes": report.episodes, "failed": report.failed,
        "weaknesses": dg.MetadataValue.md("\n".join(evidence)),
        "groups": records_table(rows, ["dimension", "group", "episodes", "failed", "fail_rate", "modes", "evidence"]),
        "weaknesses_plot": dg.MetadataValue.path(str(plot)),
        "report": dg.MetadataValue.path(str(path)),
        "evaluation_dir": dg.MetadataValue.path(str(folder)),
    })
