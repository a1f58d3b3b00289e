"""Everything that runs environments: runtime, agent loop, verification, reward, training. Never imports awm_assets."""
