"""`targeted_seed_batch` asset: the weaknesses turned into a seed batch that `seed_batch_sensor` picks up
(thin; the batch format is awm_assets.synthesis.seeds, its prompt awm_assets.synthesis.prompts).
No `from __future__ import annotations` here: Dagster resolves annotations at definition time."""

import json

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.partitions import seed_batch_partitions
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import asset_link
from awm_resources.store import ArtifactStore


class TargetedBatchConfig(dg.Config):
    max_new_scenarios: int = Field(default=1, description="the batch's cap on accepted scenarios (the classifier, "
                                                          "dedup and category caps apply too)")
    candidates: int = Field(default=3, description="candidate scenarios the LLM is asked for")
    weaknesses: int = Field(default=4, description="how many of the weakest groups go into the prompt")


def write_targeted_batch(store: ArtifactStore, config: TargetedBatchConfig) -> dict:
    """Write the next targeted seed batch from the newest weaknesses report; what was written, or why not."""
    from awm_assets.synthesis.seeds import DEFAULT_SEED_DIR, next_targeted_name, targeted_batch_lines
    from awm_resources.settings import load_settings
    from awm_resources.store import atomic_write_text
    from awm_rl.weaknesses import latest_report

    latest = latest_report(store)
    if latest is None:
        raise dg.Failure(description="no weaknesses report in the store: materialize `weaknesses` first",
                         allow_retries=False)
    path, report = latest
    chosen = report.weaknesses[:config.weaknesses]
    if not chosen:
        return {"seed_batch": None, "weaknesses_report": str(path),
                "reason": f"{report.policy} failed none of {report.episodes} episodes: nothing to aim at"}
    failed: dict[str, int] = {}
    for g in report.groups:
        if g.dimension == "category":
            for e in g.examples:
                failed[e["scenario"]] = failed.get(e["scenario"], 0) + 1
    scenarios = []
    for key, n in failed.items():
        sc = store.scenario(key) if store.has(key, "scenario.json") else None
        scenarios.append({"name": (sc.name if sc else None) or key, "description": (sc.description if sc else "") or "",
                          "failed": n})
    generated = sorted(p.stem for p in (store.root / "batches").glob("*.json")) if (store.root / "batches").is_dir() else []
    name = next_targeted_name(generated)
    weak = [{k: v for k, v in w.model_dump(mode="json").items() if k != "modes"} | {"modes": w.modes} for w in chosen]
    for w in weak:  # the prompt needs the evidence, not the file paths
        w["examples"] = [{k: e.get(k) for k in ("scenario", "task_idx", "task", "mode", "detail")} for e in w["examples"]]
    lines = targeted_batch_lines(weak, scenarios, evaluation=report.evaluation,
                                 max_new_scenarios=config.max_new_scenarios, candidates=config.candidates)
    out = (load_settings().paths.seed_dir or DEFAULT_SEED_DIR) / f"{name}.jsonl"  # where seed_batch_sensor looks
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return {"seed_batch": str(out), "batch": name, "weaknesses_report": str(path),
            "weaknesses": [f"{w.dimension}={w.key}" for w in chosen],
            "seeds": [json.loads(line)["name"] for line in lines[1:]]}


@dg.asset(
    deps=["weaknesses"],
    group_name="evolve",
    kinds={"python"},
    description="The weakest groups of `weaknesses`, with their evidence, as a new seed batch (seeds/evolve_<n>.jsonl, "
                "where seed_batch_sensor picks it up): its scenario generation asks the LLM for scenarios and task "
                "styles that exercise them, under the same classifier, dedup and caps, plus the batch's own cap.",
)
def targeted_seed_batch(context: dg.AssetExecutionContext, config: TargetedBatchConfig,
                        store: StoreResource) -> dg.MaterializeResult:
    out = write_targeted_batch(store.get_store(), config)
    if out["seed_batch"] is None:
        context.log.warning(out["reason"])
        return dg.MaterializeResult(metadata={"seed_batch": "", "reason": out["reason"],
                                              "weaknesses_report": dg.MetadataValue.path(out["weaknesses_report"])})
    if not context.instance.has_dynamic_partition(seed_batch_partitions.name, out["batch"]):
        context.instance.add_dynamic_partitions(seed_batch_partitions.name, [out["batch"]])
    context.log.info(f"wrote {out['seed_batch']} aimed at {', '.join(out['weaknesses'])}")
    return dg.MaterializeResult(metadata={
        "seed_batch": dg.MetadataValue.path(out["seed_batch"]),
        "scenario_generation": dg.MetadataValue.md(asset_link("scenario_generation", out["batch"])),
        "weaknesses": dg.MetadataValue.md("\n".join(f"- {w}" for w in out["weaknesses"])),
        "seeds": dg.MetadataValue.md("\n".join(f"- {s}" for s in out["seeds"])),
        "weaknesses_report": dg.MetadataValue.path(out["weaknesses_report"]),
    })
