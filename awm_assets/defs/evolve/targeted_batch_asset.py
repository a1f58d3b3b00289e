"""`targeted_seed_batch` asset: the weaknesses turned into a seed batch that `seed_batch_sensor` picks up
(thin: awm_assets.synthesis.targeted_batch writes it; the batch format is awm_assets.synthesis.seeds, its prompt
awm_assets.synthesis.prompts).
No `from __future__ import annotations` here: Dagster resolves annotations at definition time."""

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.partitions import seed_batch_partitions
from awm_assets.defs.shared.resources import StoreResource
from awm_assets.defs.shared.ui_tables import asset_link
from awm_assets.synthesis.targeted_batch import NoWeaknessesReport, write_targeted_batch


class TargetedBatchConfig(dg.Config):
    max_new_scenarios: int = Field(default=1, description="the batch's cap on accepted scenarios (the classifier, "
                                                          "dedup and category caps apply too)")
    candidates: int = Field(default=3, description="candidate scenarios the LLM is asked for")
    weaknesses: int = Field(default=4, description="how many of the weakest groups go into the prompt")


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
    try:
        out = write_targeted_batch(store.get_store(), max_new_scenarios=config.max_new_scenarios,
                                   candidates=config.candidates, weaknesses=config.weaknesses)
    except NoWeaknessesReport as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
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
