"""The code location's definitions by domain, each package with its assets, checks, jobs, sensors and
automation; `awm_assets.definitions` merges them. `shared` holds what several domains use."""
