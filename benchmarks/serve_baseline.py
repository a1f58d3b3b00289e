"""The baseline side of `awm bench serve`: the published way of serving environments, one process per instance.

Each instance is a `python server.py` (uvicorn) process on its own copy of the scenario's SQLite file, called over
plain HTTP with a deadline; its reset rebuilds the database from the scenario's SQL. It replays the workload our
side discovered and records its failures the same way, so both sides are compared on the same scenarios.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import process_tree, rss_mb
from benchmarks.serve_workload import Failures, instance_script, p50, percentile, short_error

START_TIMEOUT_S = 60.0  # a baseline server's start, from spawn to its OpenAPI document


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sql_statements(text: str) -> list[str]:
    out, buf = [], ""
    for line in text.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _reset_sql(folder: Path) -> tuple[list[str], list[str], str]:
    """The SQL the published reset replays: schema.sql + sample.sql, or (a scenario without schema.sql,
    e.g. one written by hand) the SQL dump of its initial database; and which one it is."""
    if (folder / "schema.sql").is_file():
        sample = folder / "sample.sql"
        return (_sql_statements((folder / "schema.sql").read_text(encoding="utf-8")),
                _sql_statements(sample.read_text(encoding="utf-8")) if sample.is_file() else [], "schema.sql")
    conn = sqlite3.connect(f"file:{folder / 'initial.db'}?mode=ro", uri=True)
    try:
        dump = [s for s in conn.iterdump() if s not in ("BEGIN TRANSACTION;", "COMMIT;")]
    finally:
        conn.close()
    return dump, [], "initial.db dump"


def _sql_rebuild(db: Path, schema: list[str], sample: list[str]) -> None:
    """The published reset: drop everything and replay the schema and sample SQL in place."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        names = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table','view') "
                             "AND name NOT LIKE 'sqlite_%'").fetchall()
        conn.execute("BEGIN")  # one transaction for everything: the fastest honest SQL replay
        for kind, name in names:
            conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        for stmt in schema:
            try:
                conn.execute(stmt)
            except sqlite3.Error:
                pass
        for stmt in sample:
            if stmt.upper().startswith("PRAGMA"):
                continue
            try:
                conn.execute(stmt)
            except sqlite3.Error:
                pass
        conn.execute("COMMIT")
    finally:
        conn.close()


class BaselineServer:
    """One `python server.py` process on its own database copy, and its HTTP client (every call with a
    deadline). Its errors are strings for the report: what happened, never a traceback."""

    def __init__(self, scenario: str, index: int, folder: Path, work: Path, call_timeout_s: float):
        import httpx

        self.scenario, self.i, self.timeout = scenario, index, call_timeout_s
        self.db = work / f"{scenario}-{index}.db"
        self.log = work / f"{scenario}-{index}.stderr"
        shutil.copyfile(folder / "initial.db", self.db)
        self.port = _free_port()
        env = {**os.environ, "DATABASE_PATH": f"sqlite:///{self.db}", "PORT": str(self.port), "HOST": "127.0.0.1"}
        with open(self.log, "wb") as err:  # uvicorn's access log goes to stdout, errors to stderr
            self.proc = subprocess.Popen([sys.executable, str(folder / "server.py")], cwd=work, env=env,
                                         stdout=subprocess.DEVNULL, stderr=err, preexec_fn=self._limit)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=call_timeout_s)
        self.routes: dict[str, Any] = {}

    @staticmethod
    def _limit() -> None:  # generated code: cap the server's address space, own process group
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, resource.RLIM_INFINITY))
        os.setsid()

    def wait_ready(self, tools: set[str], start_timeout_s: float) -> str | None:
        """Poll the OpenAPI document until the server answers; None when ready, else what went wrong."""
        import httpx

        from awm_rl.runtime.tools import tool_routes_from_openapi

        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            try:
                resp = self.client.get("/openapi.json")
                if resp.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                return f"server exited with status {self.proc.returncode} before answering{self.stderr_tail()}"
            time.sleep(0.005)
        else:
            return f"no answer to GET /openapi.json within {start_timeout_s:g} s"
        try:
            self.routes = tool_routes_from_openapi(resp.json())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return f"its OpenAPI document could not be read ({type(exc).__name__}: {short_error(exc, 150)})"
        missing = sorted(tools - set(self.routes))
        return f"its OpenAPI document has no route for tool(s) {', '.join(missing)}" if missing else None

    def request(self, tool: str, args: dict[str, Any]) -> tuple[str, str, bytes | None, dict | None]:
        """(method, url, body, headers) of a tool call, built as an HTTP client would."""
        from awm_rl.runtime.tools import to_request

        req = to_request(self.routes[tool], args)
        url = req.path + (("?" + req.query.decode()) if req.query else "")
        return req.method, url, req.body, {"content-type": "application/json"} if req.body else None

    def stderr_tail(self) -> str:
        try:
            lines = [x for x in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                     if x.strip() and not x.startswith("INFO:")]  # uvicorn's start-up lines say nothing
        except OSError:
            return ""
        return f" (its stderr ended with: {short_error(lines[-1], 200)})" if lines else ""

    def broken(self, exc: BaseException) -> str:
        """What a call that raised means: the server died, stopped answering, or dropped the connection.
        A server that is still up but failed is killed (it is left out; it must not hold the CPU)."""
        import httpx

        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            return f"server exited with status {code}{self.stderr_tail()}"
        self.kill()
        if isinstance(exc, httpx.TimeoutException):
            return f"no answer within {self.timeout:g} s"
        return f"connection failed ({type(exc).__name__}{': ' + short_error(exc, 150) if str(exc) else ''})"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        self.client.close()
        self.kill()
        self.proc.wait()


def _answer_fault(tool: str, status: int, body: bytes) -> str | None:
    """A 5xx or a 2xx/3xx that is not JSON is the environment's failure; a 4xx is the script's error."""
    if status >= 500:
        return f"tool {tool} answered HTTP {status}"
    if status < 400:
        try:
            json.loads(body)
        except ValueError:
            return f"tool {tool} answered something that is not JSON ({body[:60]!r})"
    return None


def _baseline_call(srv: BaselineServer, tool: str, args: dict[str, Any], phase: str,
                   failures: Failures) -> float | None:
    """One call, timed (ms); None if it failed (recorded in `failures`)."""
    import httpx

    try:
        method, url, body, headers = srv.request(tool, args)
    except (ValueError, KeyError) as exc:
        failures.fail(srv.scenario, phase, f"could not build the request for {tool} ({short_error(exc, 150)})")
        return None
    t = time.perf_counter()
    try:
        resp = srv.client.request(method, url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        failures.fail(srv.scenario, phase, srv.broken(exc))
        return None
    ms = (time.perf_counter() - t) * 1000
    fault = _answer_fault(tool, resp.status_code, resp.content)
    if fault:
        failures.fail(srv.scenario, phase, fault)
        return None
    failures.answered(srv.scenario, resp.status_code)
    return ms


def _baseline_throughput(servers: list[BaselineServer], scripts: dict[str, Any], failures: Failures,
                         out: dict[str, Any]) -> None:
    """Every server runs its instance's script repeatedly, concurrently (phase "throughput")."""
    import httpx

    async def run(srv: BaselineServer) -> int:
        n = 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.port}", timeout=srv.timeout) as ac:
            for rep in range(25):
                for tool, args in instance_script(scripts[srv.scenario], srv.i * 1000 + rep):
                    if srv.scenario in failures:
                        return n
                    try:
                        method, url, body, headers = srv.request(tool, args)
                        resp = await ac.request(method, url, content=body, headers=headers)
                    except httpx.HTTPError as exc:
                        failures.fail(srv.scenario, "throughput", srv.broken(exc))
                        return n
                    except (ValueError, KeyError) as exc:
                        failures.fail(srv.scenario, "throughput", f"could not build the request for {tool} "
                                                                  f"({short_error(exc, 150)})")
                        return n
                    n += 1
                    fault = _answer_fault(tool, resp.status_code, resp.content)
                    if fault:
                        failures.fail(srv.scenario, "throughput", fault)
                        return n
                    failures.answered(srv.scenario, resp.status_code)
        return n

    async def workload() -> tuple[int, float]:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(run(srv) for srv in servers))
        return sum(counts), time.perf_counter() - t0
    n, dt = asyncio.run(workload())
    out["workload_calls"] = n
    out["throughput_calls_per_s"] = round(n / dt, 1)


def _baseline_memory(servers: list[BaselineServer], extrapolate_to: int, out: dict[str, Any]) -> None:
    rss = sum(rss_mb(process_tree(srv.proc.pid)) for srv in servers)
    db_mb = sum(srv.db.stat().st_size for srv in servers) / 2**20
    out["instances"] = len(servers)
    out["rss_mb_total"] = round(rss, 1)
    out["db_mb_total"] = round(db_mb, 2)
    out["total_mb"] = round(rss + db_mb, 1)
    out["mb_per_instance"] = round((rss + db_mb) / len(servers), 3)
    out["total_mb_extrapolated"] = round(out["mb_per_instance"] * extrapolate_to, 1)
    out["note"] = (f"measured on {len(servers)} instances; memory extrapolated linearly to {extrapolate_to} "
                   "(each instance is an independent process)")


class Baseline:
    """The baseline's servers for one benchmark run (at least one per scenario), measured like ours: `each()`
    the phases one scenario at a time (start, latency, reset: per-scenario samples), `all(live)` the phases
    with every server at once (throughput, memory), again if a scenario in them fails later."""

    def __init__(self, store_root: Path, scripts: dict[str, Any], *, instances: int, extrapolate_to: int,
                 latency_calls: int, call_timeout_s: float, failures: Failures,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.store_root, self.scripts, self.failures = store_root, scripts, failures
        self.instances, self.extrapolate_to, self.latency_calls = instances, extrapolate_to, latency_calls
        self.call_timeout_s, self.start_timeout_s = call_timeout_s, start_timeout_s
        self.work = Path(tempfile.mkdtemp(prefix="awm-bench-baseline-"))
        self.servers: list[BaselineServer] = []
        self.samples: dict[str, dict[str, Any]] = {s: {"creates": [], "lat": [], "resets": []} for s in scripts}
        self.sql: dict[str, tuple[list[str], list[str], str]] = {}

    def each(self) -> None:
        self._start()
        reads = [(srv, r) for srv in self.servers for r in self.scripts[srv.scenario]["reads"]]
        for i in range(self.latency_calls if reads else 0):  # latency: one call at a time
            srv, r = reads[i % len(reads)]
            if srv.scenario not in self.failures:
                ms = _baseline_call(srv, r["tool"], r["args"], "latency", self.failures)
                self.samples[srv.scenario]["lat"] += [ms] if ms is not None else []
        for srv in self.servers:  # reset: the published SQL rebuild, three times per server
            for _ in range(3 if srv.scenario not in self.failures else 0):
                t = time.perf_counter()
                if not self._rebuild(srv):
                    break
                self.samples[srv.scenario]["resets"].append((time.perf_counter() - t) * 1000)
        self._stop_left_out()

    def _start(self) -> None:
        scenarios = list(self.scripts)
        for i in range(max(self.instances, len(scenarios))):
            s = scenarios[i % len(scenarios)]
            if s in self.failures:
                continue
            t = time.perf_counter()
            srv = BaselineServer(s, i, self.store_root / "scenarios" / s, self.work, self.call_timeout_s)
            self.servers.append(srv)  # closed by close() whatever happens
            why = srv.wait_ready({r["tool"] for r in self.scripts[s]["reads"]} |
                                 {w["tool"] for w in self.scripts[s]["writes"]}, self.start_timeout_s)
            if why:
                self.failures.fail(s, "start", why, counted=False)
                continue
            ms = (time.perf_counter() - t) * 1000
            self.samples[s]["creates"].append(ms)
            self.samples[s].setdefault("cold", round(ms, 1))

    def _rebuild(self, srv: BaselineServer) -> bool:
        s = srv.scenario
        try:
            if s not in self.sql:
                self.sql[s] = _reset_sql(self.store_root / "scenarios" / s)
            _sql_rebuild(srv.db, *self.sql[s][:2])
            return True
        except (OSError, UnicodeDecodeError, sqlite3.Error) as exc:
            self.failures.fail(s, "reset", f"the SQL rebuild failed ({type(exc).__name__}: {short_error(exc, 200)})")
            return False

    def _stop_left_out(self) -> None:
        """Servers of left-out scenarios stop here: they must not hold the CPU or count in memory."""
        for srv in self.servers:
            if srv.scenario in self.failures:
                srv.kill()

    def all(self, live: list[str]) -> dict[str, Any]:
        """Throughput then memory with the servers of the `live` scenarios, each on its initial database."""
        self._stop_left_out()
        servers = [srv for srv in self.servers if srv.scenario in live]
        servers = [srv for srv in servers if self._rebuild(srv)]
        out: dict[str, Any] = {}
        _baseline_throughput(servers, self.scripts, self.failures, out)
        self._stop_left_out()
        servers = [srv for srv in servers if srv.scenario not in self.failures]
        if servers:  # else measured again without the scenarios that failed
            _baseline_memory(servers, self.extrapolate_to, out)
        return out

    def close(self) -> None:
        for srv in self.servers:
            srv.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def summary(self, everything: dict[str, Any], scenarios: list[str]) -> dict[str, Any]:
        """The baseline's report over the measured `scenarios`."""
        def pooled(key: str) -> list[float]:
            return [x for s in scenarios for x in self.samples[s][key]]

        cold = {s: self.samples[s]["cold"] for s in scenarios}
        lat = pooled("lat")
        return {"extrapolated_to": self.extrapolate_to, **everything,
                "method": "one `python server.py` (uvicorn) process per instance on its own SQLite file; tool "
                          "calls as plain HTTP requests (cheaper than the published MCP over HTTP); reset = "
                          "rebuild the database from schema.sql + sample.sql (or the SQL dump of initial.db: "
                          "`reset_sql`)",
                "cold_start_ms_by_scenario": cold, "cold_start_ms": round(statistics.median(cold.values()), 1),
                "cold_start_ms_max": max(cold.values()), "create_ms_p50": p50(pooled("creates")),
                "call_ms_p50": p50(lat), "call_ms_p99": percentile(lat, 0.99), "reset_ms_p50": p50(pooled("resets")),
                "reset_sql": {s: self.sql[s][2] for s in scenarios},
                "failed_calls_by_scenario": {s: n for s, n in self.failures.refused.items() if s in scenarios}}
