"""`awm serve SCENARIO [--port P] [--home DIR]` (the `awm` CLI forwards argv here): the environment as an MCP
server (streamable HTTP); this process runs the MCP front only, the scenario runs in a replaceable sandboxed worker
(`runtime.served`). `awm serve --openenv` (the catalog over OpenEnv's protocol) is `awm_rl.integrations`', which
sits above the runtime; the CLI routes it there. Also runnable as `python -m awm_rl.runtime.commands serve ...`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def serve_main(argv: list[str]) -> int:
    """`awm serve SCENARIO`: load the scenario from the store and serve it over MCP until interrupted."""
    parser = argparse.ArgumentParser(prog="awm serve", description="Serve one environment as an MCP server "
                                     "(streamable HTTP) with its own database copy and a reset tool.")
    parser.add_argument("scenario", help="scenario key or name (normalised like the AWM dataset)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--home", type=Path, default=None, help="artifact store root (default $AWM_HOME)")
    parser.add_argument("--path", default="/mcp", help="MCP endpoint path (default /mcp)")
    parser.add_argument("--call-timeout", type=float, default=10.0, help="seconds per tool call (default 10)")
    parser.add_argument("--memory-mb", type=int, default=2048,
                        help="extra address space the env code may use (default 2048)")
    args = parser.parse_args(argv)

    import asyncio
    import warnings

    from starlette.middleware import Middleware

    from awm_resources.names import normalize_scenario_name
    from awm_resources.settings import max_answer_bytes, max_request_bytes
    from awm_resources.store import ArtifactStore
    from awm_rl.isolation.sandbox import isolation_summary, scratch_summary
    from awm_rl.runtime.listening import listening_socket
    from awm_rl.runtime.mcp_server import BodyLimit, build_mcp_server, serve_options
    from awm_rl.runtime.served import ServedEnvironment, ServeLoadError

    store = ArtifactStore(args.home)
    try:
        key = normalize_scenario_name(args.scenario)
    except ValueError as exc:
        print(f"awm serve: {exc}", file=sys.stderr)
        return 2
    folder = store.scenario_dir(key)
    if not (folder / "server.py").is_file():
        available = ", ".join(s for s in store.list_scenarios() if (store.scenario_dir(s) / "server.py").is_file())
        print(f"awm serve: unknown scenario {args.scenario!r} (no {folder / 'server.py'}); "
              f"scenarios with environment code in {store.root}: {available or 'none'}", file=sys.stderr)
        return 2
    # Bind first: a port conflict is reported as such, and the socket (TCP, Nagle off) is handed to uvicorn.
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        print(f"awm serve: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore")
    try:
        env = ServedEnvironment(str(store.root), key, call_timeout_s=args.call_timeout, memory_mb=args.memory_mb)
    except ServeLoadError as exc:
        print(f"awm serve: environment {key!r} could not be loaded: {exc}", file=sys.stderr)
        return 1
    server = build_mcp_server(env)
    port = sock.getsockname()[1]
    print(f"awm serve: OS isolation of its worker: {isolation_summary()}; {scratch_summary('host')}; answers up to "
          f"{max_answer_bytes():,} bytes, requests up to {max_request_bytes():,} bytes", file=sys.stderr, flush=True)
    print(f"awm serve: {key} ({len(env.tools)} tools + reset_environment) at "
          f"http://{args.host}:{port}{args.path} (cold start {env.cold_start_ms:.0f} ms)", flush=True)
    body_limit = Middleware(BodyLimit, limit=max_request_bytes() + 64 * 1024)  # + the JSON-RPC envelope
    try:  # answers as one JSON body, not an event stream (`mcp_server.serve_options`)
        asyncio.run(server.run_http_async(show_banner=False, transport="http", host=args.host, port=port,
                                          path=args.path, log_level="warning", sockets=[sock],
                                          middleware=[body_limit], **serve_options()))
    except KeyboardInterrupt:
        pass
    finally:
        env.close()
    return 0


if __name__ == "__main__":  # python -m awm_rl.runtime.commands serve SCENARIO ...
    if sys.argv[1:2] != ["serve"]:
        print("usage: python -m awm_rl.runtime.commands serve SCENARIO [--port P] ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve_main(sys.argv[2:]))
