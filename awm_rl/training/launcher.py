"""Launch a training job on Ray: the trainer runs in an actor (GPUs when asked), progress streams back.

`launch_training` connects to the cluster at `ray.address` / $RAY_ADDRESS (or starts a local one),
starts a `TrainerWorker` actor with the configured GPUs/CPUs, runs the job in it and polls its
progress events once a second, handing each to `on_event` (the CLI prints them, the Dagster asset
logs them). The environment host actors are created by the job on the same cluster. Files are
written by the actor: on a multi-node cluster `output_dir` and the artifact store must be on
storage every node sees.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from awm_rl.training.config import TrainConfig
from awm_rl.training.job import TrainingError, run_training

EventSink = Callable[[dict[str, Any]], None]
# Environment the trainer process needs from the launching one (offline hubs, LLM judge settings).
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "AWM_HOME", "AWM_LLM_MODEL",
                 "AWM_LLM_API_BASE", "AWM_LLM_API_KEY", "AWM_REPLAY_DIR", "RAY_AUTH_MODE", "TRL_EXPERIMENTAL_SILENCE")


class TrainerWorker:
    """Actor body: runs one job and keeps its progress events for `poll`."""

    def __init__(self, env: dict[str, str]) -> None:
        os.environ.update(env)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _push(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append({"time": time.time(), **event})

    def run(self, config: dict[str, Any]) -> dict[str, Any]:
        return run_training(TrainConfig.model_validate(config), on_event=self._push)

    def poll(self, since: int) -> list[dict[str, Any]]:
        with self._lock:
            return self._events[since:]

    def node(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "gpu_ids": ray.get_gpu_ids(), "pid": os.getpid()}


def launch_training(config: TrainConfig, on_event: EventSink | None = None, *, poll_s: float = 1.0) -> dict[str, Any]:
    """Run the job in a Ray actor (or in this process when `ray.in_process`); returns its summary."""
    config = config.resolved()
    if config.ray.in_process:
        return run_training(config, on_event)
    import ray

    from awm_resources.ray_cluster import init_ray

    info = init_ray(config.ray.address)
    if on_event:
        on_event({"kind": "info", "message": f"Ray cluster {info.get('address')} ({info.get('num_cpus')} CPUs); "
                  f"trainer actor with {config.ray.trainer_num_gpus} GPU(s), {config.ray.trainer_num_cpus} CPU(s)"})
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    env["AWM_HOME"] = str(config.store_root())
    actor_cls = ray.remote(num_cpus=config.ray.trainer_num_cpus, num_gpus=config.ray.trainer_num_gpus,
                           max_concurrency=2, max_restarts=0)(TrainerWorker)
    actor = actor_cls.remote(env)
    try:
        try:
            placed = ray.get(actor.node.remote(), timeout=config.ray.startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TrainingError(f"the trainer actor was not placed within {config.ray.startup_timeout_s:.0f}s: it needs "
                                f"{config.ray.trainer_num_gpus} GPU(s) and {config.ray.trainer_num_cpus} CPU(s); the cluster "
                                f"has {ray.available_resources()} free") from None
        if on_event:
            on_event({"kind": "info", "message": f"trainer actor on node {placed['node_id'][:12]} (pid {placed['pid']}, "
                      f"GPUs {placed['gpu_ids']})"})
        ref = actor.run.remote(config.model_dump())
        seen = 0
        while True:
            done, _ = ray.wait([ref], timeout=poll_s)
            try:
                events = ray.get(actor.poll.remote(seen), timeout=60)
            except Exception:  # noqa: BLE001  the actor died: ray.get(ref) below reports why
                events = []
            seen += len(events)
            for event in events:
                if on_event:
                    on_event(event)
            if done:
                break
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TrainingError):
                raise TrainingError(str(cause)) from None
            raise TrainingError(f"the training job failed in its Ray actor: {exc}") from None
        except ray.exceptions.RayActorError as exc:
            raise TrainingError(f"the trainer actor died (out of memory, or killed): {exc}") from None
    finally:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
