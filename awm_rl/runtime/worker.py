"""One scenario's isolated worker process (`python -m awm_rl.runtime.worker STORE OPTIONS SCENARIO`).

The host actor (`awm_rl.runtime.actor.IsolatedHost`) starts it inside the sandbox (`awm_rl.isolation.sandbox`):
it applies the seccomp filter first, then runs an `InProcessHost` that imports the scenario's generated code, says
it is ready (with the load info, or the load error), and answers one request at a time over its pipes, dispatched
through the protocol's table (`protocol.WORKER_METHODS`). Its stdout is the protocol: what generated code prints
goes to stderr (the actor's log). This file is the untrusted side of the pipe; the actor's side is in actor.py.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from awm_rl.runtime.protocol import WORKER_METHODS, encode_message, read_message


def serve_worker(store_root: str, options: dict[str, Any], scenario: str) -> int:
    """Import `scenario`, say ready, then answer requests until the actor closes the pipe."""
    from awm_rl.isolation.seccomp import enforce_in_sandbox

    seccomp = enforce_in_sandbox()  # before the scenario's code is imported

    from awm_rl.runtime.actor import InProcessHost
    from awm_rl.runtime.envcode import EnvLoadError

    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # what generated code prints goes to the log, never into the protocol
    host = InProcessHost(store_root, **options)
    host.seccomp = seccomp  # its stats say, per scenario, how this worker is filtered
    try:
        ready: dict[str, Any] = {"ready": True, "pid": os.getpid(), "load": host.host.load(scenario),
                                 "seccomp": seccomp}
    except EnvLoadError as exc:
        ready = {"ready": True, "pid": os.getpid(), "load_error": str(exc), "seccomp": seccomp}
    protocol_out.write(encode_message(ready))
    protocol_out.flush()
    if "load_error" in ready:
        return 0
    while True:
        try:
            request = read_message(protocol_in)
        except EOFError:
            return 0
        name = request.get("m") if isinstance(request, dict) else None
        method = WORKER_METHODS.get(name) if isinstance(name, str) else None
        if method is None:
            answer: Any = {"error": f"unknown method {name!r}"}
        else:
            answer = method.run(host, request.get("ops") or [])
        protocol_out.write(encode_message(answer))
        protocol_out.flush()


if __name__ == "__main__":
    sys.exit(serve_worker(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]))
