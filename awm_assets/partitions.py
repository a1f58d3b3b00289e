"""Partition definitions, defined once: one partition per scenario, one per seed batch."""

import dagster as dg

scenario_partitions = dg.DynamicPartitionsDefinition(name="scenarios")
seed_batch_partitions = dg.DynamicPartitionsDefinition(name="seed_batches")
# BFCL categories the `bfcl_evaluation` asset runs (bfcl-eval's bundled multi-turn data).
bfcl_category_partitions = dg.StaticPartitionsDefinition(
    ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
)
