"""The seccomp filter inside the sandbox (`awm_rl.isolation.seccomp`): hostile code calls the kernel's riskiest
interfaces directly (ctypes `syscall()`, the Python guards switched off first) from every sandboxed entry
point (env check, host worker, `awm serve`, verifier); each call fails with EPERM (clone3: ENOSYS), while
ordinary work (fork, a subprocess, a thread) still runs. Plus the BPF program itself, applied in a forked
child so that the pytest process is never filtered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from awm_rl.isolation import seccomp
from awm_rl.isolation.sandbox import bwrap_path, sandboxed_command, seccomp_level

ARCH = seccomp.native_arch()
NUMBERS = seccomp.SYSCALLS.get(ARCH or "", {})

# Defines probe_syscalls(_imp, nrs) -> {attack: "ok" | errno name, ...}. `_imp` is an import function (a
# verifier passes the worker's real __import__ past its allow-list).
PROBE = '''
def probe_syscalls(_imp, nrs):
    ctypes, errno, os = _imp("ctypes"), _imp("errno"), _imp("os")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def call(name, *args):
        ctypes.set_errno(0)
        conv = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args]
        r = libc.syscall(ctypes.c_long(nrs[name]), *conv)
        err = ctypes.get_errno()
        if name == "clone" and r == 0:
            os._exit(0)  # the child of a clone that should have been refused
        if name == "clone" and r > 0:
            os.waitpid(r, 0)
        return "ok" if r >= 0 else errno.errorcode.get(err, str(err))

    def call_in_child(name, *args):  # a call that, allowed, would change the calling process (traced)
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(wfd, call(name, *args).encode())
            os._exit(0)
        os.close(wfd)
        answer = os.read(rfd, 100).decode()
        os.close(rfd)
        os.waitpid(pid, 0)
        return answer

    out = {
        "unshare_user": call("unshare", 0x10000000),
        "unshare_net": call("unshare", 0x40000000),
        "clone_newuser": call("clone", 0x10000000 | 17, 0, 0, 0, 0),
        "clone_newns": call("clone", 0x00020000 | 17, 0, 0, 0, 0),
        "mount": call("mount", b"none", b"/tmp", b"tmpfs", 0, 0),
        "ptrace_traceme": call_in_child("ptrace", 0, 0, 0, 0),
        "ptrace_attach_parent": call("ptrace", 16, os.getppid(), 0, 0),
        "keyctl": call("keyctl", 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
        "add_key": call("add_key", b"user", b"awm", b"x", 1, -3),
        "bpf": call("bpf", 0, 0, 0),
        "io_uring_setup": call("io_uring_setup", 1, 0),
        "perf_event_open": call("perf_event_open", 0, 0, -1, -1, 0),
        "userfaultfd": call("userfaultfd", 0),
        "setns": call("setns", 0, 0),
        "process_vm_readv": call("process_vm_readv", os.getppid(), 0, 0, 0, 0, 0),
        "open_tree": call("open_tree", -100, b"/", 0),
        "clone3": call("clone3", 0, 0),
    }
    # ordinary work goes on
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    out["subprocess"] = _imp("subprocess").run(["/bin/sh", "-c", "true && exit 3"]).returncode
    threading = _imp("threading")
    box = []
    t = threading.Thread(target=lambda: box.append("ran"))
    t.start()
    t.join()
    out["thread"] = box[0] if box else "no"
    with open("/proc/self/status") as fh:
        out["seccomp_mode"] = [line.split()[1] for line in fh if line.startswith("Seccomp:")][0]
    return out
'''

DENIED = {"unshare_user", "unshare_net", "clone_newuser", "clone_newns", "mount", "ptrace_traceme",
          "ptrace_attach_parent", "keyctl", "add_key", "bpf", "io_uring_setup", "perf_event_open", "userfaultfd",
          "setns", "process_vm_readv", "open_tree"}


def assert_filtered(seen: dict) -> None:
    wrong = {k: seen[k] for k in DENIED if seen[k] != "EPERM"}
    assert not wrong, f"not refused with EPERM: {wrong}"
    assert seen["clone3"] == "ENOSYS", seen
    assert (seen["fork"], seen["subprocess"], seen["thread"]) == (7, 3, "ran"), seen
    assert seen["seccomp_mode"] == "2", seen  # SECCOMP_MODE_FILTER


# ---------------------------------------------------------------------------------------------
# the BPF program, in a forked child

def _in_child(fn) -> tuple[int, dict]:
    """Run `fn()` in a forked child (the filter applies to the child only); its exit code and JSON result."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            os.write(write_fd, json.dumps(fn()).encode())
        except BaseException as exc:  # noqa: BLE001 - the forked child reports any failure to the test
            os.write(write_fd, json.dumps({"error": repr(exc)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), (json.loads(data) if data else {})


def test_filter_denies_in_a_forked_child():
    assert ARCH is not None, "seccomp has no syscall table for this architecture"
    space: dict = {}
    exec(PROBE, space)  # noqa: S102 - the test's own probe code

    def child():
        status = seccomp.apply_filter()
        out = space["probe_syscalls"](__import__, NUMBERS)
        out["status"], out["status_after"] = status, seccomp.seccomp_status()
        if ARCH == "x86_64":  # the x32 ABI (same audit arch, nr | 0x40000000): getpid
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            out["x32"] = libc.syscall(ctypes.c_long(0x40000000 + 39)), ctypes.get_errno()
        return out

    code, seen = _in_child(child)
    assert code == 0, seen
    assert_filtered(seen)
    assert re.fullmatch(r"seccomp: \d+ syscalls denied, clone with namespace flags denied \(\w+\)", seen["status"])
    assert seen["status_after"] == seen["status"]
    if ARCH == "x86_64":
        assert seen["x32"] == [-1, 1], seen["x32"]
    assert seccomp.seccomp_status().startswith("off"), "the pytest process itself must stay unfiltered"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 ABI exists on x86_64 only")
def test_32_bit_syscalls_are_denied():
    """`int 0x80` (AUDIT_ARCH_I386, other syscall numbers) is another way into the kernel: all refused."""
    import ctypes
    import mmap

    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (i386 getpid); int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    getpid32 = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    _, plain = _in_child(lambda: {"pid": getpid32(), "real": os.getpid()})
    if plain.get("pid") != plain.get("real"):
        pytest.skip(f"this kernel has no i386 emulation ({plain})")
    code, seen = _in_child(lambda: {"status": seccomp.apply_filter(), "pid": getpid32()})
    assert code == 0 and seen["pid"] == -1, seen  # -EPERM


def test_program_matches_the_kernel_headers():
    """Syscall numbers against the C headers where installed; every jump lands inside the program."""
    headers = {"x86_64": (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), r"#define __NR_(\w+)\s+(\d+)"),
               "aarch64": (Path("/usr/include/asm-generic/unistd.h"), r"#define __NR(?:3264)?_(\w+)\s+(\d+)")}
    for arch, table in seccomp.SYSCALLS.items():
        program = seccomp.build_program(arch)
        assert len(program) < 256
        for i, (code, jt, jf, _k) in enumerate(program):
            if code & 0x07 == 0x05:  # BPF_JMP
                assert i + 1 + max(jt, jf) < len(program)
        assert program[-3:] == [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x00050026)]
        path, pattern = headers[arch]
        if path.is_file():
            known = {m.group(1): int(m.group(2)) for m in re.finditer(pattern, path.read_text())}
            assert {k: v for k, v in table.items() if known.get(k) != v} == {}, arch
            assert [n for n in seccomp.DENIED_SYSCALLS if n in known and n not in table] == [], arch
    assert "iopl" in seccomp.denied_syscalls("x86_64") and "iopl" not in seccomp.denied_syscalls("aarch64")


def test_enforce_exits_rather_than_run_unfiltered(monkeypatch):
    monkeypatch.delenv(seccomp.ENV_VAR, raising=False)
    assert seccomp.enforce_in_sandbox().startswith("off")  # outside the sandbox: nothing applied

    def child():
        os.environ[seccomp.ENV_VAR] = "1"
        seccomp.native_arch = lambda: None  # as on an unsupported architecture
        seccomp.enforce_in_sandbox()
        return {"ran": "unfiltered"}

    code, seen = _in_child(child)
    assert code == seccomp.EXIT_NO_FILTER and seen == {}, (code, seen)


def test_sandbox_starts_workers_with_the_filter(require_bubblewrap):
    level = seccomp_level()
    assert level.startswith("seccomp: ") and f"({ARCH})" in level, level
    argv, _ = sandboxed_command([sys.executable, "-c", "pass"])
    assert argv[argv.index("--setenv") + 1: argv.index("--setenv") + 3] == ["AWM_SECCOMP", "1"]
    version = subprocess.run([bwrap_path(), "--version"], capture_output=True, text=True).stdout.split()[-1]
    if tuple(int(x) for x in version.split(".")[:2]) >= (0, 8):  # no nested user namespace either
        assert "--disable-userns" in argv, argv


# ---------------------------------------------------------------------------------------------
# hostile code at every sandboxed entry point

ENV_ATTACK = '''
import json, os
from fastapi import FastAPI
import awm_rl.isolation.limits as _limits

app = FastAPI(title="syscalls")
NRS = %(nrs)r
%(probe)s

@app.get("/notes", operation_id="list_notes")
def list_notes():
    return {"notes": ["still serving"]}


@app.get("/attack", operation_id="attack")
def attack():
    _limits._guard_state["permanent"] = False  # the audit-hook guard, switched off from inside
    _limits._guard_state["depth"] = 0
    return probe_syscalls(__import__, NRS)
''' % {"nrs": NUMBERS, "probe": PROBE}


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "initial.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY)")
    conn.close()
    return db


def test_env_check_worker_is_filtered(tmp_path):
    from awm_rl.quality.envcheck import check_env_code

    code = ENV_ATTACK + '''
_limits._guard_state["permanent"] = False
_limits._guard_state["depth"] = 0
raise RuntimeError("AWM-RESULT " + json.dumps(probe_syscalls(__import__, NRS)) + " AWM-END")
'''
    result = check_env_code(code, _db(tmp_path), timeout_s=10)
    assert result.isolation == "bubblewrap" and result.seccomp == seccomp_level(), result
    match = re.search(r"AWM-RESULT (\{.*?\}) AWM-END", result.error or "", re.S)
    assert match, result.error
    assert_filtered(json.loads(match.group(1)))
    good = check_env_code(ENV_ATTACK, _db(tmp_path), timeout_s=10)  # the same module checks fine when it behaves
    assert good.ok and good.seccomp.startswith("seccomp: "), good.error


def test_host_worker_is_filtered(tmp_path_factory):
    from awm_rl.runtime.pool import EnvironmentPool
    from tests.runtime.conftest import make_scenario

    root = tmp_path_factory.mktemp("seccomp_store")
    make_scenario(root, "syscalls_env", ENV_ATTACK)
    pool = EnvironmentPool(root, num_hosts=1, prefetch=0, call_timeout_s=5.0)
    try:
        h = pool.acquire("syscalls_env")
        r = pool.call_tool(h, "attack", {})
        assert r.ok, r
        assert_filtered(json.loads(r.text))
        assert "still serving" in pool.call_tool(h, "list_notes", {}).text  # the worker survives, serves on
        stats = pool.host_stats()[0]
        assert stats["isolation"] == "bubblewrap", stats
        assert stats["scenarios"]["syscalls_env"]["seccomp"] == seccomp_level(), stats
        pool.release(h)
    finally:
        pool.close()


def test_awm_serve_is_filtered(tmp_path):
    from fastmcp import Client

    from tests.runtime.conftest import make_scenario

    make_scenario(tmp_path / "store", "syscalls_env", ENV_ATTACK)
    proc = subprocess.Popen([sys.executable, "-m", "awm_rl.runtime.commands", "serve", "syscalls_env", "--port", "0",
                             "--home", str(tmp_path / "store")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline, line = time.monotonic() + 90, ""
        while time.monotonic() < deadline and "awm serve:" not in line and proc.poll() is None:
            line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert url, f"awm serve did not start: {line!r}"

        async def session() -> dict:
            async with Client(url.group(1)) as client:
                res = await client.call_tool("attack", {}, raise_on_error=False)
                assert not res.is_error, res.content[0].text
                assert not (await client.call_tool("list_notes", {}, raise_on_error=False)).is_error
                return json.loads(res.content[0].text)

        assert_filtered(asyncio.run(session()))
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_verifier_is_filtered(tmp_path):
    from awm_rl.isolation.verification import run_verifier

    body = "\n".join("    " + line for line in PROBE.strip("\n").splitlines())
    verifier = f'''
def verify_task(initial_db_path, final_db_path):
    import sqlite3
    g = sqlite3.connect.__globals__
    g["_JOB"] = None  # the worker's audit hook, switched off
    b = g["__builtins__"]
    real_import = (b if isinstance(b, dict) else vars(b))["__import__"]
{body}
    return probe_syscalls(real_import, {NUMBERS!r})
'''
    db = _db(tmp_path)
    outcome = run_verifier(verifier, db, db, function="verify_task")
    assert outcome.ok, outcome.error
    assert outcome.isolation == "bubblewrap" and outcome.seccomp == seccomp_level(), outcome
    assert_filtered(outcome.result)
