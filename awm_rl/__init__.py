"""Everything that runs environments, in tiers each importing only those before it (tests/test_layers.py):
isolation < agent < runtime, bfcl < reward, tau2, mcp_universe < quality < evaluation < training < integrations.
Never imports awm_assets or Dagster."""
