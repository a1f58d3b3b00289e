"""Hostile environment code in the env check (`check_env_code`): every attack fails inside bubblewrap.

Each hostile module first switches the Python-level guards off (the audit hook's state lives in the
worker and generated code can reset it, as the issue found), so what is tested is the OS isolation.
It reports what it saw by raising an exception whose message the check's `error` carries back.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sqlite3
import tempfile
import uuid
from pathlib import Path

import pytest

from awm_rl.quality.envcheck import check_env_code

from .conftest import descendants, processes_with, wait_gone

PROJECT_ROOT = Path(__file__).resolve().parents[2]

PRELUDE = '''
import json, os, socket
import awm_rl.isolation.limits as _limits
_limits._guard_state["permanent"] = False   # switch the audit-hook guard off from inside
_limits._guard_state["depth"] = 0
seen = {}
def attempt(name, fn):
    try:
        seen[name] = "OK " + str(fn())[:300]
    except BaseException as exc:
        seen[name] = "FAILED " + type(exc).__name__ + ": " + str(exc)[:120]
'''
REPORT = '\nraise RuntimeError("AWM-RESULT " + json.dumps(seen) + " AWM-END")\n'


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "initial.db"
    if not db.exists():
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        conn.close()
    return db


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch) -> Path:
    """The check's temporary folders go here (others may run checks concurrently in /tmp)."""
    folder = tmp_path / "tempdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def leftovers(tmp_path: Path) -> list[str]:
    return glob.glob(str(tmp_path / "tempdir" / "awm-envcheck-*"))


def run_hostile(tmp_path: Path, body: str, **kw) -> tuple[dict, object]:
    result = check_env_code(PRELUDE + body + REPORT, _db(tmp_path), timeout_s=kw.pop("timeout_s", 10), **kw)
    assert result.isolation == "bubblewrap"
    assert leftovers(tmp_path) == [], "the check left its temporary folder behind"
    match = re.search(r"AWM-RESULT (\{.*?\}) AWM-END", result.error or "", re.S)
    assert match, f"the hostile module did not report (it must run and fail): {result.error}"
    return json.loads(match.group(1)), result


def test_cannot_read_home_or_project_files(tmp_path, home_secret):
    path, value = home_secret
    seen, result = run_hostile(tmp_path, f'''
attempt("home", lambda: open({str(path)!r}).read())
attempt("home_listing", lambda: os.listdir({str(Path.home())!r}))
attempt("dotenv", lambda: open({str(PROJECT_ROOT / ".env")!r}).read())
attempt("project_file", lambda: open({str(PROJECT_ROOT / "pyproject.toml")!r}).read())
attempt("shadow", lambda: open("/etc/shadow").read())
''')
    assert value not in result.model_dump_json()
    for name in ("home", "dotenv", "project_file", "shadow"):
        assert seen[name].startswith("FAILED"), (name, seen[name])
    assert path.read_text() == value


def test_cannot_write_outside_scratch(tmp_path, victim):
    marker = Path(tempfile.gettempdir()) / f"awm-fault-{uuid.uuid4().hex}"
    home_marker = Path.home() / f".awm-fault-{uuid.uuid4().hex}"
    seen, _ = run_hostile(tmp_path, f'''
attempt("victim", lambda: open({str(victim)!r}, "w").write("pwned"))
attempt("host_tmp", lambda: open({str(marker)!r}, "w").write("pwned"))
attempt("home", lambda: open({str(home_marker)!r}, "w").write("pwned"))
attempt("project", lambda: open({str(PROJECT_ROOT / "awm_rl" / "isolation" / "limits.py")!r}, "a").write("# pwned"))
attempt("site_packages", lambda: open(os.path.join(os.path.dirname(json.__file__), "pwned.py"), "w").write("x"))
''')
    assert victim.read_text() == "keep me"
    assert not marker.exists() and not home_marker.exists()
    assert "pwned" not in (PROJECT_ROOT / "awm_rl" / "isolation" / "limits.py").read_text()
    # Inside, /tmp is a private tmpfs: a write there may succeed and vanishes with the sandbox; the
    # host's file is what must be untouched (above). The rest of the file system is read-only.
    for name in ("home", "project", "site_packages"):
        assert seen[name].startswith("FAILED"), (name, seen[name])


def test_no_network_even_with_the_guard_off(tmp_path, listener):
    seen, _ = run_hostile(tmp_path, f'''
def connect(host):
    s = socket.socket()
    s.settimeout(2)
    s.connect((host, {listener.port}))
    return "connected"
attempt("loopback", lambda: connect("127.0.0.1"))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
attempt("public", lambda: connect("1.1.1.1"))
import ctypes, struct
def raw_connect():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)
    addr = struct.pack("<HH4s8x", 2, socket.htons({listener.port}), socket.inet_aton("127.0.0.1"))
    rc = libc.connect(fd, addr, len(addr))
    return f"rc={{rc}} errno={{ctypes.get_errno()}}"
attempt("libc_connect", raw_connect)
''')
    assert listener.accepted == 0
    for name in ("loopback", "dns", "public"):
        assert seen[name].startswith("FAILED"), (name, seen[name])
    assert "rc=-1" in seen["libc_connect"], seen["libc_connect"]


def test_parent_environment_is_not_readable(tmp_path, secret):
    seen, result = run_hostile(tmp_path, '''
attempt("ppid", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read().decode(errors="replace"))
attempt("init", lambda: open("/proc/1/environ", "rb").read().decode(errors="replace"))
attempt("self", lambda: open("/proc/self/environ", "rb").read().decode(errors="replace"))
def every_process():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                out.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    return " ".join(out)
attempt("all", every_process)
attempt("os_environ", lambda: dict(os.environ))
''')
    dumped = result.model_dump_json()
    assert secret not in dumped
    assert "AWM_FAULT_API_KEY" not in dumped and "OPENAI_API_KEY" not in dumped
    assert seen["all"].startswith("OK")  # it looked, and found nothing


def test_cannot_kill_the_parent_or_other_processes(tmp_path, sacrificial):
    seen, result = run_hostile(tmp_path, f'''
import signal
attempt("ppid", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("known_pid", lambda: os.kill({sacrificial.pid}, signal.SIGKILL))
attempt("real_parent", lambda: os.kill({os.getpid()}, signal.SIGKILL))
attempt("visible", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
''')
    assert sacrificial.poll() is None, "a process outside the sandbox was killed"
    assert seen["known_pid"].startswith("FAILED") and seen["real_parent"].startswith("FAILED")
    assert seen["visible"] == "OK [1, 2]"  # its own PID namespace: bwrap's init and itself
    assert result.exit_code is not None


def test_kill_everything_visible_takes_down_only_the_sandbox(tmp_path, sacrificial):
    code = 'import os, signal\nos.kill(-1, signal.SIGKILL)\n'
    result = check_env_code(PRELUDE + code, _db(tmp_path), timeout_s=10)
    assert sacrificial.poll() is None
    assert not result.ok and result.error  # reported as a failed check, not a crashed caller
    assert leftovers(tmp_path) == []


def test_detached_process_does_not_outlive_the_check(tmp_path):
    marker = f"4242.{uuid.uuid4().int % 10**6}"
    seen, _ = run_hostile(tmp_path, f'''
import ctypes
libc = ctypes.CDLL(None)
def detach():
    pid = libc.fork()
    if pid == 0:
        libc.setsid()
        libc.execv(b"/bin/sleep", (ctypes.c_char_p * 3)(b"sleep", b"{marker}", None))
        os._exit(1)
    return pid
attempt("fork_setsid", detach)
attempt("system_background", lambda: libc.system(b"nohup sleep {marker} >/dev/null 2>&1 &"))
''')
    assert seen["fork_setsid"].startswith("OK")  # the spawn itself worked inside the sandbox...
    assert wait_gone(marker) == [], "a process started by the checked code outlived the check"  # ...and died with it


def test_ctypes_system_cannot_touch_the_host(tmp_path, victim, home_secret):
    path, value = home_secret
    out = Path(tempfile.gettempdir()) / f"awm-fault-{uuid.uuid4().hex}"
    seen, result = run_hostile(tmp_path, f'''
import ctypes
libc = ctypes.CDLL(None)
attempt("system", lambda: libc.system(b"echo pwned > {victim}; cat {path} > {out}; touch /root/awm-pwned"))
attempt("system_status", lambda: libc.system(b"true"))
''')
    assert seen["system_status"] == "OK 0"  # the shell did run, inside the sandbox
    assert victim.read_text() == "keep me"
    assert not out.exists() and not Path("/root/awm-pwned").exists()
    assert value not in result.model_dump_json()


def test_leftover_processes_are_gone_after_a_timeout(tmp_path):
    marker = f"4243.{uuid.uuid4().int % 10**6}"
    code = f'''
import ctypes, time
ctypes.CDLL(None).system(b"sleep {marker} &")
time.sleep(600)
'''
    result = check_env_code(PRELUDE + code, _db(tmp_path), timeout_s=2)
    assert not result.ok and "did not finish" in result.error
    assert wait_gone(marker) == []


@pytest.mark.parametrize("probe", [False, True])
def test_a_good_environment_still_checks_in_the_sandbox(tmp_path, probe):
    from tests.runtime.conftest import BAD_ENV

    result = check_env_code(BAD_ENV, _db(tmp_path), expected_tools=["add_note", "list_notes"], probe=probe)
    assert result.isolation == "bubblewrap"
    assert result.health_tool == "list_notes" and result.health_status == 200, result.error
    assert [p for p in descendants() if p in processes_with("awm_rl.quality.envcheck")] == []
