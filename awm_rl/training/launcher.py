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


def trainer_env(config: TrainConfig) -> dict[str, str]:
    """What the trainer process gets from the launching one: the variables that travel to Ray
    (awm_resources.settings: offline hubs, LLM judge settings, ...) and the run's artifact store."""
    from awm_resources.settings import ray_forwarded_env

    return {**ray_forwarded_env(), "AWM_HOME": str(config.store_root())}


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


class EventQueue:
    """Actor body: progress events from rank 0 of a data-parallel job, polled by the launcher."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []

    def push(self, event: dict[str, Any]) -> None:
        self._events.append({"time": time.time(), **event})

    def poll(self, since: int) -> list[dict[str, Any]]:
        return self._events[since:]


def _train_worker(loop_config: dict[str, Any]) -> None:
    """Ray Train worker body: one data-parallel trainer process (the process group is already set up)."""
    import ray
    from ray import train

    os.environ.update(loop_config["env"])
    queue = loop_config["events"]
    rank = train.get_context().get_world_rank()
    on_event = (lambda event: queue.push.remote(event)) if rank == 0 else None
    summary = run_training(TrainConfig.model_validate(loop_config["config"]), on_event=on_event)
    if rank == 0:
        ray.get(queue.push.remote({"kind": "summary", "message": "summary", "summary": summary}))


def _launch_data_parallel(config: TrainConfig, on_event: EventSink | None, env: dict[str, str],
                          poll_s: float) -> dict[str, Any]:
    """`ray.trainer_workers` trainer processes under Ray Train's TorchTrainer (DDP / FSDP / ZeRO-3 through
    transformers' Trainer on the process group Ray Train sets up); environment hosts stay where
    `environments.env_host_resources` puts them. Files go to `output_dir` (storage every node sees)."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    workers, gpus = config.ray.trainer_workers, config.ray.trainer_num_gpus
    backend = config.ray.backend if config.ray.backend != "auto" else ("nccl" if gpus else "gloo")
    queue = ray.remote(num_cpus=0)(EventQueue).remote()
    resources = {"CPU": max(0.01, config.ray.trainer_num_cpus), **({"GPU": gpus} if gpus else {})}  # no empty bundles
    trainer = TorchTrainer(
        _train_worker, train_loop_config={"config": config.model_dump(), "env": env, "events": queue},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0, resources_per_worker=resources),
        torch_config=TorchConfig(backend=backend, timeout_s=int(config.ray.startup_timeout_s) + 1800),
        run_config=RunConfig(name=f"awm-{config.name}", storage_path=str(config.resolved_output_dir() / "ray_train")))
    if on_event:
        on_event({"kind": "info", "message": f"{workers} data-parallel trainer workers ({config.ray.strategy}, {backend}),"
                  f" {gpus} GPU(s) and {config.ray.trainer_num_cpus} CPU(s) each"})
    box: dict[str, Any] = {}

    def fit() -> None:
        try:
            box["result"] = trainer.fit()
        except BaseException as exc:  # noqa: BLE001  reported below, in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=fit, name="awm-ray-train", daemon=True)
    thread.start()
    seen, summary = 0, None
    try:
        while True:
            thread.join(timeout=poll_s)
            events = ray.get(queue.poll.remote(seen), timeout=60)
            seen += len(events)
            for event in events:
                if event.get("kind") == "summary":
                    summary = event["summary"]
                elif on_event:
                    on_event(event)
            if not thread.is_alive():
                break
    finally:
        ray.kill(queue, no_restart=True)
    if "error" in box:
        cause = box["error"]
        while getattr(cause, "__cause__", None) is not None and not isinstance(cause, TrainingError):
            cause = cause.__cause__
        if isinstance(cause, TrainingError):
            raise TrainingError(str(cause)) from None
        raise TrainingError(f"the data-parallel training job failed: {box['error']}") from None
    if summary is None:
        raise TrainingError("the data-parallel training job ended without a summary from rank 0")
    return summary


def launch_training(config: TrainConfig, on_event: EventSink | None = None, *, poll_s: float = 1.0) -> dict[str, Any]:
    """Run the job in a Ray actor, in `ray.trainer_workers` Ray Train workers, or in this process
    (`ray.in_process`); returns its summary."""
    config = config.resolved()
    if config.ray.in_process:
        return run_training(config, on_event)
    import ray

    from awm_resources.ray_cluster import init_ray

    info = init_ray(config.ray.address)
    if config.ray.trainer_workers > 1:
        return _launch_data_parallel(config, on_event, trainer_env(config), poll_s)
    if on_event:
        on_event({"kind": "info", "message": f"Ray cluster {info.get('address')} ({info.get('num_cpus')} CPUs); "
                  f"trainer actor with {config.ray.trainer_num_gpus} GPU(s), {config.ray.trainer_num_cpus} CPU(s)"})
    env = trainer_env(config)
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
        except Exception:  # noqa: BLE001 - cleanup: the actor may be gone already
            pass
