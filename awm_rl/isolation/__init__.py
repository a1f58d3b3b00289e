"""The security boundary: everything that runs untrusted (generated) code goes through this package.

- `sandbox`: bubblewrap (no network, own PID namespace, read-only system, uid nobody) and the scratch bounds;
- `seccomp`: the syscall filter every sandboxed interpreter installs first;
- `process`: spawning a worker in its own process group, and killing the whole group;
- `limits`: the address-space, CPU, file-size and descriptor limits a worker applies to itself;
- `verification` + `verifier_worker`: the verifiers' runner and the stdlib-only worker that runs them.

It imports nothing of `awm_rl` (only `awm_resources`); the runtime's environment workers, the env-code check and the
reward use it. docs/isolation.md says what each layer stops.
"""
