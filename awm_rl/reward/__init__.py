"""Scoring episodes: the code-augmented judge, the reward rule and the verifier audit."""

from awm_rl.reward.audit import AuditEntry, audit_verifiers, excluded_tasks, summarize, write_audit
from awm_rl.reward.judge import Judge, JudgeMode
from awm_rl.reward.reward import CLASS_REWARD, FORMAT_ERROR_REWARD, needs_judge, score_episode, score_episodes
from awm_rl.reward.tasks import TaskRecord, load_task, load_tasks

__all__ = [
    "AuditEntry", "CLASS_REWARD", "FORMAT_ERROR_REWARD", "Judge", "JudgeMode", "TaskRecord", "audit_verifiers",
    "excluded_tasks", "load_task", "load_tasks", "needs_judge", "score_episode", "score_episodes", "summarize",
    "write_audit",
]
