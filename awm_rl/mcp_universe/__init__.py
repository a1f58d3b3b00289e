"""MCP-Universe (the paper's third out-of-distribution benchmark) through our agent loop, scored by its own
evaluators (the `mcpuniverse` package, in its own venv: it pins mcp 1.13 and pydantic 2.11).

`evaluate_mcp_universe` runs MCP-Universe task files; `environment` holds the adapter and the worker client,
`mcpu_worker.py` the part that runs inside MCP-Universe's venv. Importing this package imports neither.
"""

from awm_rl.mcp_universe.environment import MCPUniverseUnavailable
from awm_rl.mcp_universe.runner import LIVE_SERVICES, MCPUniverseReport, evaluate_mcp_universe, find_tasks

__all__ = ["LIVE_SERVICES", "MCPUniverseReport", "MCPUniverseUnavailable", "evaluate_mcp_universe", "find_tasks"]
