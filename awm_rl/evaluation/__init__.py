"""Policies measured on the catalog: `awm eval catalog` (pass@k, cost, failure reasons), `awm rollout` (one judged
episode) and the weakness report that `awm evolve` synthesizes from."""
