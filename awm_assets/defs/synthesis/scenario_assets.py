"""Scenario generation per seed batch; accepted scenarios become partitions of the stage assets."""


import json
from collections import Counter

import dagster as dg
from pydantic import Field

from awm_assets.defs.shared.partitions import scenario_partitions, seed_batch_partitions
from awm_assets.defs.shared.resources import EmbedderResource, LLMResource, StoreResource, SynthesisSettings
from awm_assets.defs.shared.ui_tables import asset_link
from awm_assets.defs.synthesis.sensors import seed_dir
from awm_assets.synthesis.scenarios import generate_scenarios, record_batch, register_accepted
from awm_assets.synthesis.seeds import SeedFileError, read_seed_batch
from awm_resources.llm import LLMConfigError, ReplayMissingError
from awm_resources.store import atomic_write_text

REAL_LLM_NOTE = ("The offline replay model answers only the bundled demo batch (seeds/demo.jsonl); any other batch "
                 "needs a real model: set AWM_LLM_MODEL (e.g. openai/gpt-5) and its API key before launching.")


class Seed(dg.Config):
    name: str = Field(description="a web application to simulate, e.g. 'Etsy seller dashboard'")
    description: str = Field(default="", description="optional: what the application does")


class SeedBatchConfig(dg.Config):
    path: str = Field(default="", description="the seed file of this batch: JSONL lines {\"name\", \"description\"?} "
                                              "or one name per line (the sensor and `awm synth` set it)")
    seeds: list[Seed] = Field(default_factory=list, description="or the seeds themselves, typed here (names, optional "
                              "descriptions): written to <seed dir>/<partition>.jsonl, so the batch is kept like a "
                              "dropped file. " + REAL_LLM_NOTE)


def seed_file_for(config: SeedBatchConfig, partition_key: str) -> str:
    """The seed file to read: the configured path, or the inline seeds written as the partition's own file."""
    if bool(config.path) == bool(config.seeds):
        raise dg.Failure(description="give either `path` (a seed file) or `seeds` (names typed in the launch "
                                     "config), not both and not neither. " + REAL_LLM_NOTE, allow_retries=False)
    if config.path:
        return config.path
    lines = [json.dumps({"name": s.name, **({"description": s.description} if s.description else {})},
                        ensure_ascii=False) for s in config.seeds]
    path = seed_dir() / f"{partition_key}.jsonl"
    text = "\n".join(lines) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") != text:
        raise dg.Failure(description=f"seed batch {partition_key!r} already has a different seed file {path}; "
                                     "name the new batch differently (or pass that file as `path`)", allow_retries=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return str(path)


@dg.asset(
    partitions_def=seed_batch_partitions,
    group_name="synthesis",
    pool="llm_api",
    kinds={"llm"},
    retry_policy=dg.RetryPolicy(max_retries=2),
    description="Self-instruct scenarios from a seed batch; CRUD classifier; embedding dedup (all batches); category "
                "caps. A new batch from the UI: add a partition (the batch name), then type its seeds in the launch "
                "config (`seeds`). " + REAL_LLM_NOTE,
)
def scenario_generation(context: dg.AssetExecutionContext, config: SeedBatchConfig, llm: LLMResource,
                        store: StoreResource, embedder: EmbedderResource,
                        synthesis: SynthesisSettings) -> dg.MaterializeResult:
    path = seed_file_for(config, context.partition_key)
    try:
        batch = read_seed_batch(path)
    except SeedFileError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    if batch.key != context.partition_key:
        raise dg.Failure(description=f"seed file {path} is batch {batch.key!r}, not partition "
                                     f"{context.partition_key!r}", allow_retries=False)
    st = store.get_store()
    client = llm.get_client()
    try:
        settings = synthesis.config()
        if embedder.dedup_threshold:  # the embedding model's own threshold wins
            settings = settings.model_copy(update={"dedup_threshold": embedder.dedup_threshold})
        result = generate_scenarios(batch, st, client, embedder.get_embedder(), settings)
    except ReplayMissingError as exc:
        raise dg.Failure(description=f"{exc}\n{REAL_LLM_NOTE}", allow_retries=False) from exc
    except LLMConfigError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    keys = register_accepted(result, st, batch)
    usage = {k: client.usage(stage="scenarios")[k] + client.usage(stage="classify")[k]
             for k in ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd")}
    record_batch(st, batch, result, usage)
    new = [k for k in keys if not context.instance.has_dynamic_partition(scenario_partitions.name, k)]
    if new:
        context.instance.add_dynamic_partitions(scenario_partitions.name, new)
    counts = result.counts()
    context.log.info(f"batch {batch.key}: {counts}; new scenario partitions: {new}")
    table = ["| scenario | category | decision | reason |", "|---|---|---|---|"]
    table += [f"| {d.name} | {d.category} | {d.status} | {d.reason.replace('|', '/')} |" for d in result.decisions]
    return dg.MaterializeResult(metadata={
        **counts,
        "seed_file": dg.MetadataValue.path(str(batch.path)),
        "seeds": len(batch.seeds),
        "new_partitions": dg.MetadataValue.md(", ".join(asset_link("tasks", k) for k in new) or "none"),
        "category_histogram": dg.MetadataValue.md("\n".join(["| category | accepted |", "|---|---|"] + [
            f"| {c} | {n} |" for c, n in Counter(d.category for d in result.accepted()).most_common()])),
        "decisions": dg.MetadataValue.md("\n".join(table)),
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "cost_usd": float(usage["cost_usd"]),
    })
