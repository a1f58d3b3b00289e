"""The environment quality gate: prove every tool, task and verifier works before training uses them.

`probe` calls every tool with database-grounded and edge inputs (in the worker that hosts the
generated code); `tasks` checks every task (do-nothing audit, write coverage, reference solution,
verifier determinism); `report` runs both for stored scenarios and sums them up.
"""
