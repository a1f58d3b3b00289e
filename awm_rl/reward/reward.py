"""Episode reward (paper point 10): format error -1.0, environment error 0, else the judge's class.

Completed 1.0, Partially Completed 0.1, Agent Error 0, Environment Error 0; the episode reward is
broadcast to every step (the per-turn training samples share it).
"""

from __future__ import annotations

from awm_rl.agent.episode import Episode, EpisodeScore, JudgeVerdict, Outcome
from awm_rl.reward.judge import Judge
from awm_rl.reward.tasks import TaskRecord

FORMAT_ERROR_REWARD = -1.0
CLASS_REWARD = {"Completed": 1.0, "Partially Completed": 0.1, "Agent Error": 0.0, "Environment Error": 0.0}
CLASS_OUTCOME: dict[str, Outcome] = {
    "Completed": "completed", "Partially Completed": "partially_completed",
    "Agent Error": "agent_error", "Environment Error": "environment_error",
}


def needs_judge(episode: Episode) -> bool:
    """Only episodes that ended normally (final answer, or out of turns) are judged."""
    return episode.termination in ("final_answer", "max_turns")


def score_episode(episode: Episode, verdict: JudgeVerdict | None = None) -> EpisodeScore:
    """The reward of one episode; `verdict` is required exactly when `needs_judge(episode)`."""
    steps = max(len(episode.steps), 1)
    if episode.termination == "format_error":
        return EpisodeScore(outcome="format_error", reward=FORMAT_ERROR_REWARD, step_rewards=[FORMAT_ERROR_REWARD] * steps,
                            reasons=episode.termination_detail or "format error")
    if episode.termination in ("environment_error", "policy_error"):
        return EpisodeScore(outcome="environment_error", reward=0.0, step_rewards=[0.0] * steps,
                            reasons=f"{episode.termination}: {episode.termination_detail}")
    if verdict is None:
        raise ValueError(f"episode {episode.scenario}/{episode.task_idx} ended with {episode.termination}: it needs a judge verdict")
    reward = CLASS_REWARD[verdict.classification]
    return EpisodeScore(outcome=CLASS_OUTCOME[verdict.classification], reward=reward, step_rewards=[reward] * steps,
                        reasons=verdict.reasons, judge=verdict)


def score_episodes(episodes: list[Episode], records: list[TaskRecord], judge: Judge) -> list[EpisodeScore]:
    """Judge (batched) the episodes that need it and score them all; input order kept."""
    if len(episodes) != len(records):
        raise ValueError(f"{len(episodes)} episodes but {len(records)} task records")
    pending = [i for i, e in enumerate(episodes) if needs_judge(e)]
    verdicts = judge.judge_many([(episodes[i], records[i]) for i in pending]) if pending else []
    by_index = dict(zip(pending, verdicts, strict=True))
    return [score_episode(e, by_index.get(i)) for i, e in enumerate(episodes)]
