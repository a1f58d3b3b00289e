"""OS isolation for processes that run generated code: the bubblewrap (`bwrap`) command line.

`sandboxed_command(argv, writable=[...], env={...})` wraps a worker's command line so that it runs

- with no network (`--unshare-net`: an empty network namespace, loopback included),
- in a new PID namespace (`--unshare-pid`: it sees and can signal only its own processes; its
  `/proc` is the namespace's own, so no parent's `/proc/<pid>/environ`), killed with its parent
  (`--die-with-parent`), in a new session (`--new-session`: no terminal injection),
- on a read-only system made of an allow-list: the system directories (`/usr`, `/lib*`, `/bin`,
  `/sbin`), a few harmless files of `/etc`, the Python installation and virtual environment, and
  the project's own packages; nothing else of the host exists inside (no home directory, no
  project `.env`, no `/run`, no Ray session folder),
- with an empty `/tmp` and `/dev/shm`, each a tmpfs of `scratch_mb` MB (`--size`; the role's
  `awm_resources.settings.scratch_mb`): tmpfs pages are host memory that the worker's address-space cap does not
  count, so without a size a handler writing into `/tmp` took 4.5 GB of the host in seconds; at the
  limit a write fails with `OSError: [Errno 28] No space left on device` in that call; the rest of
  `/dev` is read-only; only the given folders are writable besides (see `awm_rl.quality.envcheck`),
- with at most `AWM_WORKER_FDS` open descriptors (1024; `prlimit`): a socket pair queues ~220 KB of
  kernel memory no other limit counts (500 pairs held 111 MB), so this bounds that memory (~115 MB),
- with a clean environment (`--clearenv`, then only what the caller passes; `bwrap` itself is
  started with a minimal environment, because its PID-1 helper's `/proc/1/environ` is readable inside),
- as `nobody` (65534) in a new user namespace with no capabilities, which cannot create further user
  namespaces (`--disable-userns`, bubblewrap 0.8+; left out when this bwrap lacks it),
- under a seccomp filter (`awm_rl.isolation.seccomp`: ptrace, mount, namespaces, keyrings, bpf, io_uring,
  perf events... denied): `sandboxed_command` sets `AWM_SECCOMP=1` in the worker's own environment (an
  internal signal from parent to child, not a setting) and the worker's entry point applies the filter
  before it imports or runs generated code, or exits rather than run unfiltered.

Availability is detected once (bwrap is on PATH and a trivial sandboxed interpreter starts).
`isolation_level()` says what is in force: "bubblewrap", or "none: <reason>" when bubblewrap is
unavailable (a loud warning is logged once and callers fall back to their Python-level guards in
`awm_rl.isolation.limits`, which stay on as defence in depth in both cases). `AWM_SANDBOX=off` turns it off
on purpose (debugging). Callers report the level (check results, `awm bench serve`).
`seccomp_level()` says whether the workers filter themselves: "seccomp: N syscalls denied ... (arch)", or
"off: <reason>" (no sandbox, an unsupported architecture, `AWM_SANDBOX_SECCOMP=off` for debugging); the detection
probe applies the filter once inside bubblewrap to find out.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from awm_resources.settings import load_settings

log = logging.getLogger(__name__)

NOBODY = 65534
BUBBLEWRAP = "bubblewrap"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `apt-get install -y bubblewrap`; `make install` does it "
                "when run as root)")
# Packages of this project that sandboxed workers import (found through the installed finder, so an
# editable install exposes these folders only, never the project root with its .env).
_PROJECT_PACKAGES = ("awm_rl", "awm_resources")
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
# Harmless configuration the C library and Python read (no shadow, no credentials, no resolv.conf).
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
              "nsswitch.conf", "hosts", "mime.types", "ssl/openssl.cnf", "ssl/certs", "ca-certificates",
              "alternatives")
# What bwrap itself is started with: its PID-1 helper keeps this environment and it is readable inside.
_LAUNCH_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
_SECCOMP_MODULE = Path(__file__).with_name("seccomp.py")


def bwrap_path() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _python_dirs() -> list[Path]:
    """The interpreter, its standard library and the (virtual) environment's site-packages."""
    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix)}
    dirs.add(Path(os.path.realpath(sys.executable)).parent.parent)
    # package folders outside the prefixes (a system interpreter's dist-packages, a user site): code only
    dirs.update(Path(p) for p in sys.path if p and ("site-packages" in p or "dist-packages" in p))
    return sorted({d for d in dirs if d.is_dir()})


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _readonly_paths(extra: Iterable[Path] = ()) -> list[Path]:
    roots: list[Path] = []
    for path in [*_python_dirs(), *filter(None, map(_package_dir, _PROJECT_PACKAGES)), *map(Path, extra)]:
        path = Path(path)
        if path.exists() and not _under(path, roots):
            roots = [r for r in roots if not _under(r, [path])] + [path]
    return sorted(roots)


def _base_args(*, user_ns: bool, disable_userns: bool = False, scratch_mb: int | None = None) -> list[str]:
    args = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            "--new-session", "--clearenv"]
    if user_ns:
        args += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
        if disable_userns:
            args.append("--disable-userns")  # no nested user namespace (bubblewrap 0.8+)
    else:
        args += ["--cap-drop", "ALL"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for name in _ETC_FILES:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    size = ["--size", str(scratch_bytes(scratch_mb))]
    # /dev is bubblewrap's own tmpfs: its /dev/shm gets a bounded one, then the rest is made read-only.
    args += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             *size, "--tmpfs", "/tmp"]
    return args


def _fd_limit() -> list[str]:
    """`prlimit --nofile=N:N --` before bwrap (it execs it: same pid), N = `AWM_WORKER_FDS`: kernel memory
    queued in sockets (500 socket pairs held 111 MB) counts against no other limit of the worker."""
    from awm_resources.settings import worker_fds

    prlimit = shutil.which("prlimit", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")
    if prlimit is None:
        log.warning("prlimit not found (util-linux): sandboxed workers keep this process's descriptor limit")
        return []
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = worker_fds() if hard == resource.RLIM_INFINITY else min(worker_fds(), hard)  # never above ours
    return [prlimit, f"--nofile={n}:{n}", "--"]


def scratch_bytes(scratch_mb: int | None = None) -> int:
    """Size of each tmpfs of a sandboxed worker: `scratch_mb` MB, by default the "host" role's setting."""
    from awm_resources.settings import scratch_mb as setting

    return int(scratch_mb if scratch_mb is not None else setting("host")) * 2**20


def build_command(argv: Sequence[str], *, writable: Iterable[Path] = (), readable: Iterable[Path] = (),
                  env: Mapping[str, str] | None = None, cwd: Path | None = None, user_ns: bool = True,
                  disable_userns: bool = False, bwrap: str | None = None, scratch_mb: int | None = None) -> list[str]:
    """The bwrap command line for `argv` (no availability check; see `sandboxed_command`)."""
    args = [*_fd_limit(), bwrap or bwrap_path() or "bwrap",
            *_base_args(user_ns=user_ns, disable_userns=disable_userns, scratch_mb=scratch_mb)]
    readable = list(readable)
    for entry in (env or {}).get("PYTHONPATH", "").split(os.pathsep):
        # A project root on PYTHONPATH is not exposed (its .env, its data): its packages are, below.
        if entry and os.path.isdir(entry) and not any(
                os.path.exists(os.path.join(entry, marker)) for marker in (".env", "pyproject.toml", ".git")):
            readable.append(Path(entry).resolve())
    for path in _readonly_paths(readable):
        args += ["--ro-bind", str(path), str(path)]
    for path in writable:
        path = Path(path).resolve()
        args += ["--bind", str(path), str(path)]
    args += ["--remount-ro", "/"]  # the sandbox's own root (mount points, /root, /work...) is not writable either
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    if cwd is not None:
        args += ["--chdir", str(Path(cwd).resolve())]
    return [*args, "--", *argv]


class _Detected(NamedTuple):
    level: str  # what isolation_level() says
    user_ns: bool  # a user namespace is usable
    disable_userns: bool  # bwrap's --disable-userns works here
    seccomp: str  # what seccomp_level() says


# The probe: uid nobody in a user namespace (else any uid), then the seccomp filter applied and its
# status printed (the filter module loaded by path: the probe interpreter runs with -I -S).
_PROBE = """import os, sys
if {check_uid} and os.getuid() != {nobody}:
    sys.exit(3)
if {seccomp}:
    try:
        import importlib.util as u
        spec = u.spec_from_file_location("awm_seccomp_probe", {module!r})
        m = u.module_from_spec(spec)
        spec.loader.exec_module(m)
        print(m.try_apply())
    except BaseException as exc:  # a problem of the filter never counts against bubblewrap
        print("off: the probe could not load the filter: %r" % (exc,))
"""


@functools.lru_cache(maxsize=1)
def _detect() -> _Detected:
    """Runs a trivial sandboxed interpreter once per process: with a user namespace and
    --disable-userns, then without the flag (an older bwrap), then without a user namespace."""
    isolation = load_settings().isolation
    if not isolation.sandbox:
        return _Detected("none: disabled by AWM_SANDBOX=off", False, False, "off: no sandbox (AWM_SANDBOX=off)")
    bwrap = bwrap_path()
    if bwrap is None:
        return _Detected(f"none: bwrap not found ({INSTALL_HINT})", False, False, "off: no sandbox (bwrap not found)")
    want_seccomp = isolation.sandbox_seccomp
    reasons = []
    for user_ns, disable_userns in ((True, True), (True, False), (False, False)):
        code = _PROBE.format(check_uid=user_ns, nobody=NOBODY, seccomp=want_seccomp, module=str(_SECCOMP_MODULE))
        cmd = build_command([sys.executable, "-I", "-S", "-c", code], user_ns=user_ns,
                            disable_userns=disable_userns, bwrap=bwrap)
        try:
            done = subprocess.run(cmd, env=_LAUNCH_ENV, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
            continue
        if done.returncode == 0:
            lines = done.stdout.strip().splitlines()
            seccomp = (lines[-1] if lines else "off: the probe reported nothing") if want_seccomp \
                else "off: disabled by AWM_SANDBOX_SECCOMP=off"
            if user_ns and not disable_userns:
                log.info("bubblewrap: --disable-userns unusable here (%s); nested user namespaces are denied by "
                         "the seccomp filter only", reasons[-1])
            level = BUBBLEWRAP if user_ns else f"{BUBBLEWRAP} (no user namespace: {reasons[-1]})"
            return _Detected(level, user_ns, disable_userns, seccomp)
        reasons.append((done.stderr.strip() or f"exit status {done.returncode}")[:300])
    return _Detected(f"none: bwrap does not start here ({'; '.join(reasons)})", False, False,
                     "off: no sandbox (bwrap does not start)")


_warned = False


def isolation_level() -> str:
    """"bubblewrap" (full isolation), "bubblewrap (no user namespace: ...)", or "none: <reason>"."""
    global _warned
    level = _detect().level
    if level.startswith("none") and not _warned:
        _warned = True
        log.warning("!!! OS ISOLATION IS OFF (%s): generated code runs with Python-level guards only; "
                    "it can read this machine's files and the network is only refused by an audit hook. %s",
                    level, INSTALL_HINT)
    return level


def sandbox_available() -> bool:
    return isolation_level().startswith(BUBBLEWRAP)


_seccomp_warned = False


def seccomp_level() -> str:
    """What sandboxed workers apply to themselves: "seccomp: N syscalls denied, ... (arch)" or "off: <reason>"."""
    global _seccomp_warned
    level = _detect().seccomp
    if level.startswith("off") and sandbox_available() and not _seccomp_warned:
        _seccomp_warned = True
        log.warning("seccomp filter is off inside the sandbox (%s): bubblewrap alone contains generated code", level)
    return level


def isolation_summary(level: str | None = None, seccomp: str | None = None) -> str:
    """One line for run metadata and reports: "bubblewrap + seccomp: ...", "bubblewrap; seccomp off: ..." or
    "none: <reason>"; by default what processes that run generated code get on this machine."""
    level = level or isolation_level()
    if not level.startswith(BUBBLEWRAP):
        return level
    seccomp = seccomp or seccomp_level()
    return f"{level} + {seccomp}" if seccomp.startswith("seccomp") else f"{level}; seccomp {seccomp}"


def sandboxed_command(argv: Sequence[str], *, writable: Iterable[Path] = (), readable: Iterable[Path] = (),
                      env: Mapping[str, str] | None = None, cwd: Path | None = None,
                      scratch_mb: int | None = None) -> tuple[list[str], dict[str, str]]:
    """(command line, environment to start it with) for a worker running generated code.

    With bubblewrap, `env` is set inside the sandbox only (plus `AWM_SECCOMP=1` when the seccomp filter
    works here: the worker's entry point must call `awm_rl.isolation.seccomp.enforce_in_sandbox()` first) and
    the launcher gets a minimal environment; without it (see `isolation_level()`), `argv` and `env` come back unchanged.
    `scratch_mb`: MB of each of its tmpfs (`/tmp`, `/dev/shm`), by default `awm_resources.settings.scratch_mb("host")`.
    """
    env = dict(env or {})
    if not sandbox_available():
        return list(argv), env
    found = _detect()
    if seccomp_level().startswith("seccomp"):
        env["AWM_SECCOMP"] = "1"  # the entry point applies the filter (awm_rl.isolation.seccomp) or exits
    return build_command(argv, writable=writable, readable=readable, env=env, cwd=cwd, user_ns=found.user_ns,
                         disable_userns=found.disable_userns, scratch_mb=scratch_mb), dict(_LAUNCH_ENV)


def scratch_files(pid: int) -> int | None:
    """Files and folders in the private `/tmp` and `/dev/shm` of the sandbox that bwrap `pid` started, read
    from outside (statvfs through `/proc/<its child>/root`); None when it cannot be seen (ended, no sandbox).

    The tmpfs size bounds bytes, not inodes: each empty file still costs ~1 KB of kernel memory (200,000
    took 200 MB of slab in 3 s), and bubblewrap cannot set `nr_inodes`; so the worker's parent counts them
    (`scratch_files_limit`) and ends a worker that passes the limit."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            inner = fh.read().split()
        if not inner:
            return None
        total = 0
        for where in ("tmp", "dev/shm"):
            path = f"/proc/{inner[0]}/root/{where}"
            if os.stat(path).st_dev == _device(f"/{where}"):
                return None  # bubblewrap is still setting up (or tearing down): the host's own folder
            st = os.statvfs(path)
            total += st.f_files - st.f_ffree - 1  # less the mount's own root folder
        return total
    except (OSError, ValueError):
        return None


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def scratch_files_limit() -> int:
    from awm_resources.settings import scratch_files

    return scratch_files()


def scratch_summary(role: str) -> str:
    """How a sandboxed worker of `role` is bounded on scratch space, for reports: "scratch: /tmp and /dev/shm
    64 MB each (tmpfs), 10,000 files in all", or "scratch: the host's /tmp, unbounded (no sandbox)"."""
    from awm_resources.settings import scratch_mb

    if not sandbox_available():
        return "scratch: the host's /tmp, unbounded (no sandbox)"
    return f"scratch: /tmp and /dev/shm {scratch_mb(role)} MB each (tmpfs), {scratch_files_limit():,} files in all"


def returncode_signal(rc: int | None) -> int | None:
    """The signal that ended a sandboxed worker (bwrap exits with 128 + signal), else None."""
    if rc is None:
        return None
    if rc < 0:
        return -rc
    if rc > 128 and sandbox_available():
        return rc - 128
    return None


# ---------------------------------------------------------------------------------------------
# spawning: bubblewrap's --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that started it
# ends, not only the process; so every sandboxed worker is started from one thread that lives as long
# as the process (a worker started from a short-lived pool thread would be killed when it ends).

_spawn_requests: "queue.Queue[tuple[list[str], dict[str, Any], concurrent.futures.Future]]" = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawn_loop() -> None:
    while True:
        argv, kwargs, done = _spawn_requests.get()
        try:
            done.set_result(subprocess.Popen(argv, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            done.set_exception(exc)


def spawn(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen_kwargs)`, started from this process's long-lived spawner thread."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_loop, name="awm-sandbox-spawner", daemon=True)
            _spawner.start()
    done: concurrent.futures.Future = concurrent.futures.Future()
    _spawn_requests.put((list(argv), popen_kwargs, done))
    return done.result()
