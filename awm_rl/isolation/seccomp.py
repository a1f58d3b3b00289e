"""A seccomp filter for processes that run generated code: defence in depth inside bubblewrap.

Bubblewrap already gives a sandboxed worker no capabilities, no network and a read-only system; the
kernel interfaces below stay reachable from an unprivileged process all the same (user namespaces,
keyrings, eBPF, io_uring, perf events, userfaultfd, ptrace of a sibling...), and many local privilege
escalations were found there. A generated environment or verifier never needs them, so the worker denies
them to itself before it imports or runs any generated code:

- EPERM: every syscall in `DENIED_SYSCALLS` (those the architecture has),
- EPERM: `clone` with any namespace flag (`NAMESPACE_FLAGS`); plain `fork`/threads are unaffected,
- ENOSYS: `clone3` (its flags live in memory a filter cannot read; glibc then falls back to `clone`,
  as under Docker's default profile) and `memfd_create` (in `ENOSYS_SYSCALLS`),
- memory beyond the worker's limits: a memfd written with write() is host memory that neither the
  address-space cap nor the bounded scratch tmpfs counts, so `memfd_create` answers ENOSYS (as a kernel
  without it would: code that tries it falls back to a file in the bounded `/tmp`); SysV shared memory
  and message queues (`shmget`, `msgget`: EPERM) keep their pages after the worker unmaps them, up to
  the IPC namespace's limits (gigabytes); POSIX shared memory is a file in the bounded `/dev/shm`,
- EPERM: any syscall of another ABI (32-bit `int 0x80` on x86_64, the x32 range `nr >= 0x40000000`),
- everything else is allowed.

The program is classic BPF built here (no libseccomp), for x86_64 and aarch64; on another architecture
nothing is applied and the status says why. It is applied with `no_new_privs` and `seccomp(2)`
(`SECCOMP_FILTER_FLAG_TSYNC`: every thread of the process; `prctl(PR_SET_SECCOMP)` when that syscall is
missing), is inherited by every child and survives `exec`, and cannot be removed.

`awm_rl.isolation.sandbox` sets `AWM_SECCOMP=1` in a sandboxed worker's environment when bubblewrap is in
force and the filter works there; each sandboxed entry point calls `enforce_in_sandbox()` first, which
then applies the filter or ends the process (exit status `EXIT_NO_FILTER`) rather than run unfiltered.
`AWM_SECCOMP` is only that signal from parent to child, never a user setting: `AWM_SANDBOX_SECCOMP=off`
in the host's environment leaves the filter out (debugging; reported as "off: ...").
This module uses the standard library only: the verifier worker loads it by path.
"""

from __future__ import annotations

import os
import struct
import sys

ENV_VAR = "AWM_SECCOMP"
EXIT_NO_FILTER = 71  # EX_OSERR: the sandboxed worker could not filter itself and did not run

# Denied with EPERM wherever the architecture has them.
DENIED_SYSCALLS: tuple[str, ...] = (
    # tracing and reading other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    # kernel keyrings
    "keyctl", "add_key", "request_key",
    # large kernel attack surface, unneeded by generated code
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "fanotify_init", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm", "uselib",
    # memory the worker's limits do not count: SysV shared memory segments and message queues
    "shmget", "msgget",
)
# Answered ENOSYS (as by a kernel without them), so callers fall back: clone3 to clone (whose flags the
# filter reads), memfd_create to a file in the bounded /tmp.
ENOSYS_SYSCALLS: tuple[str, ...] = ("clone3", "memfd_create")
# clone() flags that create namespaces (CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET).
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
           "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
           "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442, "quotactl_fd": 443}
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {**_COMMON, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
               "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "setns": 308, "unshare": 272,
               "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
               "userfaultfd": 323, "fanotify_init": 300, "lookup_dcookie": 212, "open_by_handle_at": 304,
               "name_to_handle_at": 303, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
               "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
               "acct": 163, "quotactl": 179, "iopl": 172, "ioperm": 173, "uselib": 134,
               "shmget": 29, "msgget": 68, "memfd_create": 319, "clone": 56, "seccomp": 317},
    "aarch64": {**_COMMON, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
                "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "setns": 268, "unshare": 97,
                "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
                "userfaultfd": 282, "fanotify_init": 262, "lookup_dcookie": 18, "open_by_handle_at": 265,
                "name_to_handle_at": 264, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
                "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225,
                "acct": 89, "quotactl": 60, "shmget": 194, "msgget": 186, "memfd_create": 279,
                "clone": 220, "seccomp": 277},
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

# classic BPF and seccomp constants (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45  # BPF_JMP | BPF_JEQ / BPF_JGE / BPF_JSET | BPF_K
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LOW = 0, 4, 16  # struct seccomp_data (little-endian: args[0]'s low word at 16)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1

_applied: str | None = None


class SeccompError(RuntimeError):
    """The filter cannot be applied here (unsupported architecture, refused by the kernel)."""


def native_arch() -> str | None:
    """"x86_64" or "aarch64" when this interpreter runs on one (64-bit), else None."""
    machine = os.uname().machine.lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return arch if arch in SYSCALLS and sys.maxsize > 2**32 else None


def denied_syscalls(arch: str) -> list[str]:
    """The syscalls denied outright on `arch` (EPERM; those of `ENOSYS_SYSCALLS` ENOSYS), in filter order."""
    table = SYSCALLS[arch]
    return [name for name in DENIED_SYSCALLS if name in table] + list(ENOSYS_SYSCALLS)


def build_program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions (struct sock_filter) for `arch`."""
    if arch not in SYSCALLS:
        raise SeccompError(f"no syscall table for {arch!r} (supported: {', '.join(SYSCALLS)})")
    table = SYSCALLS[arch]
    deny = [table[name] for name in DENIED_SYSCALLS if name in table]
    body: list[tuple[int, str | int, str | int, int]] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        (_RET_K, 0, 0, _RET_ERRNO | _EPERM),  # another ABI (32-bit int 0x80...): denied
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":
        body.append((_JGE_K, "eperm", 0, _X32_SYSCALL_BIT))  # the x32 ABI shares AUDIT_ARCH_X86_64
    body += [(_JEQ_K, "eperm", 0, nr) for nr in deny]
    body += [(_JEQ_K, "enosys", 0, table[name]) for name in ENOSYS_SYSCALLS]
    body.append((_JEQ_K, "clone", "allow", table["clone"]))
    # The shared tail (jumps go forward only): clone's flag test, then the three verdicts.
    tail = {"clone": len(body), "allow": len(body) + 2, "eperm": len(body) + 3, "enosys": len(body) + 4}
    body += [
        (_LD_W_ABS, 0, 0, _OFF_ARG0_LOW),  # clone's flags
        (_JSET_K, "eperm", "allow", NAMESPACE_FLAGS),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_ERRNO | _EPERM),
        (_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
    ]
    program = []
    for i, (code, jt, jf, k) in enumerate(body):
        jumps = [tail[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= j <= 255 for j in jumps):
            raise SeccompError(f"filter jump out of range at instruction {i}")
        program.append((code, jumps[0], jumps[1], k))
    return program


def status_line(arch: str) -> str:
    return f"seccomp: {len(denied_syscalls(arch))} syscalls denied, clone with namespace flags denied ({arch})"


def apply_filter() -> str:
    """Apply the filter to this process (all its threads), for good; returns its status line.

    Raises `SeccompError` when it cannot be applied (unsupported architecture, kernel refusal).
    """
    global _applied
    import ctypes

    arch = native_arch()
    if arch is None:
        raise SeccompError(f"unsupported architecture {os.uname().machine!r} "
                           f"({8 * struct.calcsize('P')}-bit; supported: {', '.join(SYSCALLS)})")
    program = build_program(arch)
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SeccompError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    rc = libc.syscall(ctypes.c_long(SYSCALLS[arch]["seccomp"]), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                      ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        err = ctypes.get_errno()
        if rc > 0:
            raise SeccompError(f"seccomp(TSYNC): thread {rc} could not be synchronised")
        if err != _ENOSYS:
            raise SeccompError(f"seccomp(SECCOMP_SET_MODE_FILTER): {os.strerror(err)}")
        if len(os.listdir("/proc/self/task")) > 1:
            raise SeccompError("seccomp(2) is missing and this process already has threads")
        if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
            raise SeccompError(f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}")
    _applied = status_line(arch)
    return _applied


def try_apply() -> str:
    """`apply_filter()`, or "off: <reason>" instead of raising (used by the sandbox's probe)."""
    try:
        return apply_filter()
    except (SeccompError, OSError, AttributeError) as exc:
        return f"off: {exc}"


def seccomp_status() -> str:
    """This process's filter: the status line when `apply_filter` ran here, else "off: <why>"."""
    if _applied is not None:
        return _applied
    mode = None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            mode = next((line.split()[1] for line in fh if line.startswith("Seccomp:")), None)
    except OSError:
        pass
    if mode == "2":
        return "seccomp: a filter inherited from the parent process"
    return "off: not applied in this process"


def enforce_in_sandbox() -> str:
    """Called first by every sandboxed entry point: with `AWM_SECCOMP=1` (set by the sandbox), apply the
    filter or end this process with `EXIT_NO_FILTER` and a message on stderr; otherwise do nothing."""
    if os.environ.get(ENV_VAR) != "1":
        return "off: not requested (no sandbox, or AWM_SANDBOX_SECCOMP=off)"
    try:
        return apply_filter()
    except Exception as exc:  # noqa: BLE001 - any failure means: do not run unfiltered
        try:
            sys.stderr.write(f"awm sandbox: the seccomp filter could not be applied ({type(exc).__name__}: {exc}); "
                             "refusing to run generated code without it (AWM_SANDBOX_SECCOMP=off on the "
                             "host disables the filter)\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_NO_FILTER)
