"""Partition definitions, defined once: one partition per scenario, one per seed batch."""

import dagster as dg

scenario_partitions = dg.DynamicPartitionsDefinition(name="scenarios")
seed_batch_partitions = dg.DynamicPartitionsDefinition(name="seed_batches")
# BFCL categories the `bfcl_evaluation` asset runs (bfcl-eval's bundled data: awm_rl.bfcl.data.ALL_CATEGORIES,
# BFCL v3's 17), and `all`: every one of them with BFCL's overall.
bfcl_category_partitions = dg.StaticPartitionsDefinition(
    ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance",
     "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance",
     "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context", "all"]
)
