"""The environment quality gate: prove every tool, task and verifier works before training uses them.

`probe` calls every tool with database-grounded and edge inputs (in the worker that hosts the
generated code); `tasks` checks every task (do-nothing audit, write coverage, reference solution,
verifier determinism); `gate` runs both for stored scenarios and sums them up; `envcheck` is the worker that runs
generated code for the gate and the env_code synthesis stage.
"""
