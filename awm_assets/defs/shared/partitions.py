"""The partitions several domains share, defined once: one partition per scenario, one per seed batch."""

import dagster as dg

scenario_partitions = dg.DynamicPartitionsDefinition(name="scenarios")
seed_batch_partitions = dg.DynamicPartitionsDefinition(name="seed_batches")
