"""The resource bounds of processes that run generated code, from `awm_resources.settings`, re-exported for
the runtime's readers (`from awm_rl import settings; settings.max_answer_bytes()`)."""

from awm_resources.settings import (
    SCRATCH_ROLES,
    max_answer_bytes,
    max_request_bytes,
    scratch_files,
    scratch_mb,
    worker_fds,
)

__all__ = ["SCRATCH_ROLES", "max_answer_bytes", "max_request_bytes", "scratch_files", "scratch_mb", "worker_fds"]
