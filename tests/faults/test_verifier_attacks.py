"""Hostile verifiers: none can change another verifier's verdict, touch the host, or leak a secret.

Verifiers switch the worker's Python-level guard off first (`sqlite3.connect.__globals__` is the
worker module's namespace, `_JOB = None` silences its audit hook), so what holds is the process
model (a fresh forked process per verifier, the worker's code read-only) and bubblewrap.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
import uuid
from pathlib import Path

import pytest

from awm_rl.isolation.verification import WORKER_SCRIPT, VerifierJob, VerifierSandbox, run_verifier, run_verifiers

from .conftest import wait_gone

# The worker's globals and real builtins, with its audit hook switched off.
ESCAPE = '''
import sqlite3
g = sqlite3.connect.__globals__
g["_JOB"] = None
b = g["__builtins__"]
real_import = (b if isinstance(b, dict) else vars(b))["__import__"]
os = real_import("os")
'''

HONEST = '''
def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    import sqlite3
    a = sqlite3.connect(initial_db_path).execute("SELECT COUNT(*) FROM users").fetchone()[0]
    b = sqlite3.connect(final_db_path).execute("SELECT COUNT(*) FROM users").fetchone()[0]
    return {"result": "complete" if b == a + 1 else "others"}
'''


@pytest.fixture()
def dbs(tmp_path: Path) -> tuple[Path, Path]:
    initial, final = tmp_path / "initial.db", tmp_path / "final.db"
    for path, names in ((initial, ["ada", "bob"]), (final, ["ada", "bob"])):  # nothing was done: "others"
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO users (name) VALUES (?)", [(n,) for n in names])
        conn.commit()
        conn.close()
    return initial, final


def hostile(body: str) -> str:
    lines = "\n".join("    " + line for line in (ESCAPE + body).strip("\n").splitlines())
    return f"def verify_task(initial_db_path, final_db_path):\n{lines}\n"


def _honest_jobs(dbs, n=3):
    return [VerifierJob(code=HONEST, initial_db=dbs[0], final_db=dbs[1]) for _ in range(n)]


def test_patching_the_worker_does_not_change_later_verdicts(dbs):
    attack = hostile('''
forged = lambda request: {"result_json": '{"result": "complete"}'}
g["_call_verifier"] = forged
g["_run_job"] = lambda request: {"result_json": '{"result": "complete"}', "elapsed_ms": 0.0}
g["_to_outcome"] = forged
g["json"].loads = lambda *a, **k: {"result": "complete"}
g["inspect"].signature = None
return {"patched": True}
''')
    jobs = [*_honest_jobs(dbs, 1), VerifierJob(code=attack, initial_db=dbs[0], final_db=dbs[1], function="verify_task"),
            *_honest_jobs(dbs, 3)]
    with VerifierSandbox(timeout_s=5) as sandbox:
        outcomes = [sandbox.run(job) for job in jobs]
        assert sandbox.workers_started == 1  # the same worker served every job: the process model held
    assert outcomes[1].ok and outcomes[1].result == {"patched": True}
    assert [o.verdict for i, o in enumerate(outcomes) if i != 1] == ["others"] * 4
    assert all(o.isolation == "bubblewrap" for o in outcomes)


def test_worker_code_is_not_writable(dbs):
    before = hashlib.sha256(WORKER_SCRIPT.read_bytes()).hexdigest()
    attack = hostile(f'''
errors = []
for target in ({str(WORKER_SCRIPT)!r}, {str(WORKER_SCRIPT.parent / "verification.py")!r}):
    try:
        with open(target, "a") as fh:
            fh.write("\\n_call_verifier = lambda request: {{'result_json': '{{\\"result\\": \\"complete\\"}}'}}\\n")
        errors.append("written")
    except OSError as exc:
        errors.append(type(exc).__name__)
return {{"errors": errors}}
''')
    outcome = run_verifier(attack, *dbs, function="verify_task")
    assert outcome.ok, outcome.error
    assert "written" not in outcome.result["errors"]
    assert hashlib.sha256(WORKER_SCRIPT.read_bytes()).hexdigest() == before
    assert run_verifier(HONEST, *dbs).verdict == "others"


@pytest.mark.parametrize("start_delay_s", [0.0, 0.3])
def test_left_behind_process_cannot_tamper_with_later_jobs(dbs, start_delay_s):
    """A process forked by a verifier (setsid, own name) keeps killing everything it sees and
    rewriting every file it can; right away (its own job dies with the worker), or once its job has
    returned (it must be gone before the next job starts)."""
    marker = f"vghost-{uuid.uuid4().hex[:8]}"
    attack = hostile(f'''
ctypes = real_import("ctypes")
libc = ctypes.CDLL(None)
pid = libc.fork()
if pid == 0:
    libc.setsid()
    time = real_import("time")
    signal = real_import("signal")
    libc.prctl(15, b"{marker}", 0, 0, 0)  # PR_SET_NAME, to be found
    time.sleep({start_delay_s})
    end = time.time() + 8
    while time.time() < end:   # keep killing the worker and rewriting every database copy
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except OSError:
                    pass
        for name in os.listdir("."):
            try:
                os.chmod(name, 0o666)
                with open(name, "r+b") as fh:
                    fh.write(b"garbage")
            except OSError:
                pass
        time.sleep(0.005)
    os._exit(0)
return {{"child": pid}}
''')
    jobs = [VerifierJob(code=attack, initial_db=dbs[0], final_db=dbs[1], function="verify_task"),
            *_honest_jobs(dbs, 4)]
    with VerifierSandbox(timeout_s=5) as sandbox:
        outcomes = [sandbox.run(job) for job in jobs]
        started = sandbox.workers_started
    if start_delay_s:
        assert outcomes[0].ok and outcomes[0].result["child"] > 0  # the fork worked inside the sandbox
        assert started == 1  # swept after its job: the worker itself was never hit
    assert [o.verdict for o in outcomes[1:]] == ["others"] * 4, [o.error for o in outcomes[1:]]
    assert wait_gone(marker) == []


def test_killing_the_worker_only_fails_its_own_job(dbs):
    attack = hostile('''
signal = real_import("signal")
os.kill(os.getppid(), signal.SIGKILL)
os.kill(-1, signal.SIGKILL)
return {"survived": True}
''')
    jobs = [VerifierJob(code=attack, initial_db=dbs[0], final_db=dbs[1], function="verify_task"),
            *_honest_jobs(dbs, 2)]
    outcomes = run_verifiers(jobs, timeout_s=5)
    assert not outcomes[0].ok
    assert [o.verdict for o in outcomes[1:]] == ["others", "others"]


def test_no_secret_no_home_no_network(dbs, secret, home_secret, listener):
    path, value = home_secret
    attack = hostile(f'''
socket = real_import("socket")
seen = {{}}
def attempt(name, fn):
    try:
        seen[name] = "OK " + str(fn())[:2000]
    except BaseException as exc:
        seen[name] = "FAILED " + type(exc).__name__
def environs():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                out.append(open(f"/proc/{{p}}/environ", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    return " ".join(out)
attempt("environ", environs)
attempt("ppid_environ", lambda: open(f"/proc/{{os.getppid()}}/environ", "rb").read())
attempt("home", lambda: open({str(path)!r}).read())
def connect():
    s = socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", {listener.port}))
    return "connected"
attempt("loopback", connect)
return seen
''')
    outcome = run_verifier(attack, *dbs, function="verify_task")
    assert outcome.ok, outcome.error
    dumped = outcome.model_dump_json()
    assert value not in dumped and secret not in dumped
    assert outcome.result["environ"].startswith("OK")  # it looked
    assert outcome.result["home"].startswith("FAILED")
    assert outcome.result["loopback"].startswith("FAILED")
    assert listener.accepted == 0


def test_ctypes_system_cannot_touch_the_host(dbs, victim):
    out = Path(tempfile.gettempdir()) / f"awm-fault-{uuid.uuid4().hex}"
    attack = hostile(f'''
ctypes = real_import("ctypes")
libc = ctypes.CDLL(None)
status = libc.system(b"echo pwned > {victim}; touch {out}; touch /root/awm-pwned; echo x > {dbs[0]}")
return {{"status": status}}
''')
    before = dbs[0].read_bytes()
    outcome = run_verifier(attack, *dbs, function="verify_task")
    assert victim.read_text() == "keep me"
    assert not out.exists() and not Path("/root/awm-pwned").exists()
    assert dbs[0].read_bytes() == before
    assert run_verifier(HONEST, *dbs).verdict == "others"
    del outcome


def test_a_verifier_that_makes_itself_traced_is_killed_not_the_worker(dbs, monkeypatch):
    """Without the seccomp filter (which denies ptrace) a verifier can ptrace(TRACEME) and stop on a signal:
    the worker reports it and kills it, and goes on serving the next verifier."""
    from awm_rl.isolation import sandbox

    attack = hostile('''
ctypes = real_import("ctypes")
signal = real_import("signal")
rc = ctypes.CDLL(None, use_errno=True).ptrace(0, 0, None, None)  # PTRACE_TRACEME
os.kill(os.getpid(), signal.SIGUSR1)  # a traced process stops on any signal
return {"traced": rc == 0}
''')
    with monkeypatch.context() as m:
        m.setenv("AWM_SANDBOX_SECCOMP", "off")
        sandbox._detect.cache_clear()
        try:
            with VerifierSandbox(timeout_s=5) as box:
                first = box.run(VerifierJob(code=attack, initial_db=dbs[0], final_db=dbs[1], function="verify_task"))
                after = box.run(_honest_jobs(dbs, 1)[0])
                assert box.workers_started == 1
        finally:
            sandbox._detect.cache_clear()
    assert first.seccomp.startswith("off")
    assert first.error_kind == "crash" and "made itself traced" in first.error, first
    assert after.verdict == "others"
