"""The env-code check's worker process (`python -m awm_rl.quality.envcheck_worker WORK`), inside the sandbox.

Its parent (`awm_rl.quality.envcheck.check_env_code`) writes the generated code, a copy of the initial database and
the job (bounds read from the parent's settings) into WORK; this process applies the seccomp filter and its limits,
imports the code, lists the tools, calls a read tool, looks for module-level state (`_module_state_check`, see the
parent's docstring), and with the job's options probes every tool and runs the reference solutions. It reports
in WORK/result.json, rewritten after each step, so what it learned survives the code taking it down.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import re
import resource
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any


def _health_check(host: Any) -> tuple[str | None, int | None, str | None]:
    """Call the GET tool with the fewest required arguments that its examples can fill."""
    from awm_rl.runtime.tools import example_arguments, looks_read_only

    candidates = [t for t in host.tools.values() if t.method == "GET"]
    candidates.sort(key=lambda t: (not looks_read_only(t.name), len(t.input_schema.get("required", [])), t.name))
    for tool in candidates:
        args = example_arguments(tool.input_schema)
        if args is None:
            continue
        iid = host.create_instance()
        try:
            result = host.call_tool(iid, tool.name, args)
        finally:
            host.release(iid)
        return tool.name, result.status, result.text[:500]
    return None, None, None


_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
               functools.partial)
_VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"  # dates, timestamps
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # uuids
    r"|\b[0-9a-fA-F]{16,}\b"  # tokens
    r"|\d{9,}(?:\.\d+)?")  # epoch seconds or milliseconds, codes made from them


def _fingerprint(value: Any, module_name: str) -> str | None:
    """A comparable picture of a module global that generated code could mutate (None: not state)."""
    if isinstance(value, _SKIP_TYPES) or callable(value) and not isinstance(value, itertools.count):
        return None
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return repr(value)
    try:
        if isinstance(value, (dict, list, tuple, set, frozenset, bytearray, collections.deque, itertools.count)):
            return repr(value)[:200_000]
        if kind.__module__ == module_name and hasattr(value, "__dict__"):
            return repr(sorted(vars(value).items(), key=lambda kv: kv[0]))[:200_000]
    except Exception:  # noqa: BLE001 - a repr that fails is not something we can compare
        return None
    return None


def _module_globals(host: Any) -> dict[str, str]:
    module = host.env.module
    out = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        fp = _fingerprint(value, module.__name__)
        if fp is not None:
            out[name] = fp
    return out


def _module_state_check(host: Any, fresh_host: Any = None, max_calls: int = 40) -> str | None:
    """Module-level mutable state (see the module docstring): a global changed by a call, or two fresh
    instances that answer identical calls differently. Returns why, or None.

    Randomness (ids from `random`, the clock) also makes two instances differ; so a divergence counts
    only when the same calls on the first instance of a freshly imported module (`fresh_host()`) answer
    exactly as the first instance did: then what differs is what the first run left in the module."""
    from awm_rl.runtime.db import database_digest
    from awm_rl.runtime.tools import example_arguments

    calls = []
    for tool in sorted(host.tools.values(), key=lambda t: (t.method != "GET", t.name)):
        args = example_arguments(tool.input_schema)
        if args is not None:
            calls.append((tool.name, args))
    calls = calls[:max_calls]
    if not calls:
        return None

    def run(host: Any = host) -> tuple[list[str], str, str | None]:
        iid = host.create_instance()
        answers, changed = [], None
        try:
            for name, args in calls:
                before = _module_globals(host)
                res = host.call_tool(iid, name, args)
                if res.status == 504:  # a handler past its deadline: the instance is recycled, stop here
                    answers.append("timeout")
                    break
                answers.append(_VOLATILE.sub("~", f"{res.status} {res.text}"))
                after = _module_globals(host)
                if changed is None:
                    diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                    if diff:
                        changed = (f"module-level mutable state: global(s) {', '.join(diff[:5])} changed during "
                                   f"the call of {name!r}; state kept in the module is shared by every instance "
                                   "of a host (keep it in the database)")
            digest = _VOLATILE.sub("~", repr(database_digest(host.connection(iid))))
        finally:
            host.release(iid)
        return answers, digest, changed

    first, first_db, changed = run()
    if changed:
        return changed
    second, second_db, changed = run()
    if changed:
        return changed
    if first == second and first_db == second_db:
        return None
    if fresh_host is None:
        return None
    again, again_db, _ = run(fresh_host())
    if again != first or again_db != first_db:
        return None  # the calls are not reproducible even from a fresh module: randomness, not carried state
    for (name, _), a, b in zip(calls, first, second, strict=False):  # a run may stop early
        if a != b:
            return (f"module-level mutable state: identical calls on two fresh instances diverge at {name!r} "
                    f"(first {a[:160]!r}, then {b[:160]!r}), while a freshly imported module answers as the first "
                    "did; something outside the instance's database carries over between instances")
    return ("module-level mutable state: identical calls on two fresh instances left different databases, while a "
            "freshly imported module leaves the first one's; something outside the instance's database carries "
            "over between instances")


def _worker(work: Path) -> int:
    import faulthandler
    import warnings

    faulthandler.enable()  # a segfault prints the Python stack to stderr (reported by the parent)
    job = json.loads((work / "job.json").read_text(encoding="utf-8"))
    code = (work / "server.py").read_text(encoding="utf-8")
    lines = len(code.splitlines())

    def report(**data: Any) -> None:
        data.setdefault("lines_of_code", lines)
        tmp = work / "result.json.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, work / "result.json")

    # Warm the heavy imports before the limits, so the cap measures the generated code only.
    import fastapi  # noqa: F401 - the import is the warm-up
    import sqlalchemy  # noqa: F401 - as above

    from awm_rl.isolation.limits import Watchdog, apply_memory_limit, arm_permanently, rss_bytes
    from awm_rl.runtime import host as host_mod
    from awm_rl.runtime.envcode import EnvLoadError

    memory_mb = int(job["memory_mb"])
    apply_memory_limit(memory_mb)
    if job.get("file_size_limit"):  # no single file beyond the folders' limit (the parent watches the sum)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(job["file_size_limit"]),) * 2)
    host_mod._watchdog = Watchdog(rss_cap_mb=int(rss_bytes() / 2**20) + memory_mb)
    arm_permanently()
    timeout_s = float(job["timeout_s"])
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            host = host_mod.ScenarioHost("check", code, work / "initial.db", source_path=str(work / "server.py"),
                                         call_timeout_s=min(timeout_s, 10.0), import_timeout_s=timeout_s,
                                         **job["io_limits"])
    except EnvLoadError as exc:
        report(ok=False, error=str(exc), import_ms=(time.perf_counter() - t0) * 1000)
        return 0
    except MemoryError:
        report(ok=False, error="environment code ran out of memory while importing (memory cap reached)")
        return 0
    import_ms = (time.perf_counter() - t0) * 1000
    tools = list(host.tools)
    expected = job.get("expected_tools")
    missing = [t for t in expected if t not in host.tools] if expected is not None else []
    extra = [t for t in tools if expected is not None and t not in set(expected)]
    errors = []
    if not tools:
        errors.append("the app exposes no tools (no routes with an operation_id)")
    if missing:
        errors.append(f"{len(missing)} tool(s) of the API spec are missing from the app: {', '.join(missing)}")
    shadowed = {t.name: t.shadowed_by for t in host.tools.values() if t.shadowed_by}
    if shadowed:
        errors.append("unreachable tool(s), an earlier route with the same method and a matching path answers "
                      "their requests: " + ", ".join(f"{k} (shadowed by {v})" for k, v in shadowed.items()))
    health_tool, health_status, health_text = _health_check(host)
    if health_status is not None and health_status >= 500:
        errors.append(f"health check {health_tool!r} failed with HTTP {health_status}: {health_text}")
    result = dict(ok=not errors, tools=tools, missing_tools=missing, extra_tools=extra, shadowed_tools=shadowed,
                  import_ms=import_ms, error="; ".join(errors) or None, health_tool=health_tool,
                  health_status=health_status, health_text=health_text,
                  accepts_database_url=host.env.accepts_database_url, tool_specs=host.list_tools())
    report(**result)  # kept if the state check or the probe below takes the worker down
    if tools:
        host.call_timeout_s = min(host.call_timeout_s, 3.0)  # every fillable tool is called: spinners stop early
        def fresh_host() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return host_mod.ScenarioHost("check_fresh", code, work / "initial.db",
                                             source_path=str(work / "server.py"), call_timeout_s=3.0,
                                             import_timeout_s=timeout_s, **job["io_limits"])

        module_state = _module_state_check(host, fresh_host)
        host.call_timeout_s = min(timeout_s, 10.0)
        if module_state:
            errors.append(module_state)
            result.update(ok=False, error="; ".join(errors), module_state=module_state)
            report(**result)
    if job.get("probe"):
        from awm_rl.quality.probe import probe_host

        facts = _template_facts(host, work)
        result["probe"] = {name: r.to_dict() for name, r in probe_host(host, facts, budget_s=timeout_s).items()}
        report(**result)
    if job.get("solutions"):
        from awm_rl.quality.solutions import run_solutions

        result["solutions"] = run_solutions(host, job["solutions"], Path(job["snapshot_dir"]))
        report(**result)
    return 0


def _template_facts(host: Any, work: Path):
    """Database facts of the environment's effective initial state (after its import-time create_all)."""
    from awm_rl.quality.dbfacts import read_facts
    from awm_rl.runtime.db import write_db_file

    return read_facts(write_db_file(host.template, work / "template.db"))


if __name__ == "__main__":
    from awm_rl.isolation.seccomp import enforce_in_sandbox

    enforce_in_sandbox()  # in the sandbox: the seccomp filter before the generated code is imported, or exit
    sys.exit(_worker(Path(sys.argv[1])))
