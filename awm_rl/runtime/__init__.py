"""Environment runtime: host generated env code, isolated resettable instances, Ray actors, MCP endpoint."""
