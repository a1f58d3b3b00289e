"""The catalog through outside interfaces, all over the same pool instances: TRL's `environment_factory`
(`trl_env`), a verifiers environment (`verifiers_env`) and OpenEnv's protocol (`openenv_server`).

Nothing is imported here, so each interface loads only what it needs (TRL, verifiers and OpenEnv are heavy).
"""
