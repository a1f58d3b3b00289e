"""CLI entry points of the runtime; the project's `awm` CLI forwards its remaining argv here.

- `awm serve SCENARIO [--port P] [--home DIR]`: the environment as an MCP server (streamable HTTP); it
  binds its port, then re-executes itself inside bubblewrap with the listening socket (see `_exec_sandboxed`).
- `awm bench serve --json [--scenarios ...] [--instances N] [--call-timeout S] [--quick]`: runtime vs published
  baseline; a scenario that fails on either side is reported under `left_out` and measured on neither.

Also runnable without the CLI: `python -m awm_rl.runtime.commands serve|bench-serve ...`.
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
    parser.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)  # inside the sandbox
    args = parser.parse_args(argv)

    import asyncio
    import socket
    import warnings

    from awm_resources.names import normalize_scenario_name
    from awm_resources.store import ArtifactStore
    from awm_rl.limits import apply_memory_limit, drop_secrets, install_guard
    from awm_rl.runtime.envcode import EnvLoadError
    from awm_rl.runtime.host import ScenarioHost
    from awm_rl.runtime.mcp_server import build_mcp_server

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
    if args.listen_fd is None:
        # Bind here: a port conflict is reported as such, and the socket is handed to uvicorn.
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((args.host, args.port))
        except OSError as exc:
            print(f"awm serve: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return 1
        sock.listen(1024)  # clients connecting right after the ready line wait in the backlog, not refused
        _exec_sandboxed(args, key, store.root, folder, sock)  # returns only when bubblewrap is unavailable
    else:
        sock = socket.socket(fileno=args.listen_fd)  # bound outside, in the host's network namespace
    warnings.filterwarnings("ignore")
    drop_secrets()
    install_guard()
    # The limit covers the generated code's import too (the heavy libraries are already imported).
    apply_memory_limit(args.memory_mb)
    try:
        host = ScenarioHost.from_dir(key, folder, call_timeout_s=args.call_timeout)
    except EnvLoadError as exc:
        print(f"awm serve: environment {key!r} could not be loaded: {exc}", file=sys.stderr)
        return 1
    server, _instance = build_mcp_server(host)
    port = sock.getsockname()[1]
    print(f"awm serve: {key} ({len(host.tools)} tools + reset_environment) at "
          f"http://{args.host}:{port}{args.path} (cold start {host.cold_start_ms:.0f} ms)", flush=True)
    try:
        asyncio.run(server.run_http_async(show_banner=False, transport="http", host=args.host, port=port,
                                          path=args.path, log_level="warning", sockets=[sock]))
    except KeyboardInterrupt:
        pass
    return 0


def _exec_sandboxed(args: argparse.Namespace, key: str, store_root: Path, folder: Path, sock) -> None:
    """Replace this process with the same server inside bubblewrap (`awm_rl.runtime.sandbox`): the
    listening socket, bound here in the host's network namespace, is inherited and keeps accepting
    clients, while the generated code runs in an empty network namespace (it can answer connections
    but open none), its own PID namespace, with a read-only system and scenario folder, a clean
    environment, uid nobody. SIGTERM to this pid (then bubblewrap) ends the server. Returns only when
    bubblewrap is unavailable (the server then runs here under the Python-level guards alone)."""
    import os

    from awm_rl.limits import untrusted_env
    from awm_rl.runtime.sandbox import isolation_level, sandbox_available, sandboxed_command

    if not sandbox_available():
        print(f"awm serve: OS isolation: {isolation_level()}", file=sys.stderr)
        return
    fd = sock.fileno()
    os.set_inheritable(fd, True)
    inner = [sys.executable, "-m", "awm_rl.runtime.commands", "serve", key, "--home", str(store_root),
             "--host", args.host, "--path", args.path, "--call-timeout", str(args.call_timeout),
             "--memory-mb", str(args.memory_mb), "--listen-fd", str(fd)]
    argv, env = sandboxed_command(inner, readable=[folder], cwd=Path("/tmp"),
                                  env=untrusted_env(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
                                                    HOME="/tmp", TMPDIR="/tmp"))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)


def bench_serve_main(argv: list[str]) -> int:
    """`awm bench serve`: forwards to `benchmarks.serve` (the benchmark uses the pool's public API only)."""
    from benchmarks.serve import main as bench_main

    return bench_main(argv)


if __name__ == "__main__":
    if "--listen-fd" in sys.argv:  # `awm serve` re-executed in the sandbox: the filter before the scenario loads
        from awm_rl.runtime.seccomp import enforce_in_sandbox

        enforce_in_sandbox()  # applies it (AWM_SECCOMP=1, set by the sandbox) or exits
    commands = {"serve": serve_main, "bench-serve": bench_serve_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(f"usage: python -m awm_rl.runtime.commands {{{'|'.join(commands)}}} ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(commands[sys.argv[1]](sys.argv[2:]))
