"""Hostile environment code served by the Ray host pool: every attack fails inside the host's
bubblewrap'd worker (the actor only forwards batches over a pipe).

One handler tries everything and answers with what it saw; the module switches the host's
Python-level guard off first, so what is tested is the OS isolation. The host actor carries a
secret in its own process environment (as the driver's API keys would be), the test process
listens on loopback, and a file outside the store and the home directory hold bait.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psutil
import pytest

from .conftest import Listener, wait_gone

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SECRET = f"sk-host-fault-{uuid.uuid4().hex}"
NEIGHBOUR_SECRET = f"neighbour-{uuid.uuid4().hex}"  # in another scenario's code on the same host
MARKER = f"4244.{uuid.uuid4().int % 10**6}"

HOSTILE_ENV = '''
import ctypes, json, os, signal, socket, sys
from fastapi import FastAPI
from sqlalchemy import Column, Integer, String, create_engine
from sqlalchemy.orm import declarative_base, sessionmaker

import awm_rl.isolation.limits as _limits

DATABASE_PATH = os.getenv("DATABASE_PATH", "sqlite:///hostile.db")
engine = create_engine(DATABASE_PATH, connect_args={"check_same_thread": False})
SessionLocal = sessionmaker(bind=engine)
Base = declarative_base()
app = FastAPI(title="hostile")


class Note(Base):
    __tablename__ = "notes"
    id = Column(Integer, primary_key=True)
    text = Column(String, nullable=False)


Base.metadata.create_all(engine)


@app.get("/notes", operation_id="list_notes")
def list_notes():
    s = SessionLocal()
    out = [n.text for n in s.query(Note).order_by(Note.id)]
    s.close()
    return {"notes": out}


@app.get("/attack", operation_id="attack")
def attack(pid: int = 0, port: int = 0, home_file: str = "", victim: str = "", marker: str = ""):
    _limits._guard_state["permanent"] = False  # the audit-hook guard, switched off from inside
    _limits._guard_state["depth"] = 0
    seen = {}

    def attempt(name, fn):
        try:
            seen[name] = "OK " + str(fn())[:3000]
        except BaseException as exc:
            seen[name] = "FAILED " + type(exc).__name__

    def environs():
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    out.append(open(f"/proc/{p}/environ", "rb").read().decode(errors="replace"))
                except OSError:
                    pass
        return " ".join(out)

    def connect():
        s = socket.socket()
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        return "connected"

    here = os.path.dirname(os.path.abspath(__file__))
    attempt("environ", environs)
    attempt("home", lambda: open(home_file).read())
    attempt("project", lambda: open(%(pyproject)r).read())
    attempt("loopback", connect)
    attempt("kill_actor", lambda: os.kill(pid, signal.SIGKILL))
    attempt("kill_parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
    attempt("own_code", lambda: open(os.path.join(here, "server.py"), "a").write("# pwned"))
    attempt("store", lambda: open(os.path.join(here, "..", "pwned.txt"), "w").write("x"))
    attempt("other_scenario", lambda: open(os.path.join(here, "..", "neighbour_env", "server.py")).read())
    attempt("other_hosts", lambda: sorted(k.split("_")[2] for k in sys.modules if k.startswith("awm_env_")))
    libc = ctypes.CDLL(None)
    attempt("system", lambda: libc.system(("echo pwned > " + victim + "; nohup sleep " + marker + " >/dev/null 2>&1 &").encode()))
    attempt("ray_session", lambda: os.listdir("/tmp/ray"))  # Ray's sockets: a way to submit unguarded tasks
    attempt("visible", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
    return seen
''' % {"pyproject": str(PROJECT_ROOT / "pyproject.toml")}


@pytest.fixture(scope="module")
def hostile_pool(tmp_path_factory):
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.runtime.conftest import BAD_ENV, make_scenario

    root = tmp_path_factory.mktemp("hostile_store")
    make_scenario(root, "hostile_env", HOSTILE_ENV)
    make_scenario(root, "neighbour_env", BAD_ENV + f"\nNEIGHBOUR_SECRET = {NEIGHBOUR_SECRET!r}\n")
    pool = EnvironmentPool(root, num_hosts=1, prefetch=0, call_timeout_s=5.0,
                           actor_options={"runtime_env": {"env_vars": {"AWM_FAULT_API_KEY": SECRET}}})
    yield pool, root
    pool.close()


def test_host_worker_contains_hostile_code(hostile_pool, home_secret, victim, require_bubblewrap):
    pool, root = hostile_pool
    stats = pool.host_stats()[0]
    assert stats["isolation"] == "bubblewrap", stats
    actor_pid = stats["pid"]
    # the bait is there: the actor process itself carries the secret in its environment
    assert SECRET in Path(f"/proc/{actor_pid}/environ").read_bytes().decode(errors="replace")
    server_before = (root / "scenarios" / "hostile_env" / "server.py").read_text()
    path, home_value = home_secret
    listener = Listener()
    neighbour = pool.acquire("neighbour_env")  # another scenario, same host actor
    assert pool.call_tool(neighbour, "add_note", {"text": "neighbour's note"}).ok
    h = pool.acquire("hostile_env")
    try:
        r = pool.call_tool(h, "attack", {"pid": actor_pid, "port": listener.port, "home_file": str(path),
                                         "victim": str(victim), "marker": MARKER})
        assert r.ok, r
        seen = json.loads(r.text)
        assert SECRET not in r.text and home_value not in r.text
        assert seen["environ"].startswith("OK")  # it looked
        for name in ("home", "project", "loopback", "kill_actor", "own_code", "ray_session", "other_scenario"):
            assert seen[name].startswith("FAILED"), (name, seen[name])
        # one scenario per worker: no other scenario's code, instances or files in this process's reach
        assert NEIGHBOUR_SECRET not in r.text
        assert seen["other_hosts"] == "OK ['hostile']", seen["other_hosts"]  # the modules of its own scenario only
        assert "neighbour's note" in pool.call_tool(neighbour, "list_notes", {}).text
        assert seen["system"].startswith("OK")  # the shell ran, inside the sandbox
        assert seen["visible"].startswith("OK [1, 2"), seen["visible"]  # its own PID namespace
        assert listener.accepted == 0
        assert psutil.pid_exists(actor_pid) and psutil.Process(actor_pid).status() != "zombie"
        assert victim.read_text() == "keep me"
        assert (root / "scenarios" / "hostile_env" / "server.py").read_text() == server_before
        assert not (root / "scenarios" / "pwned.txt").exists()
        assert pool.call_tool(h, "list_notes", {}).ok  # the host still serves
    finally:
        pool.release(h)
        pool.release(neighbour)
        listener.close()


def test_processes_started_by_env_code_end_with_the_pool(tmp_path_factory, require_bubblewrap):
    """A detached process started by generated code lives at most as long as its host worker."""
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.runtime.conftest import make_scenario

    marker = f"4245.{uuid.uuid4().int % 10**6}"
    code = HOSTILE_ENV.replace("Base.metadata.create_all(engine)",
                               f"Base.metadata.create_all(engine)\nctypes.CDLL(None).system(b'nohup sleep {marker} >/dev/null 2>&1 &')")
    root = tmp_path_factory.mktemp("detach_store")
    make_scenario(root, "detach_env", code)
    pool = EnvironmentPool(root, num_hosts=1, prefetch=0)
    try:
        h = pool.acquire("detach_env")
        assert pool.call_tool(h, "list_notes", {}).ok
        pool.release(h)
    finally:
        pool.close()
    assert wait_gone(marker, seconds=20) == [], "a process started by env code outlived its host"
