"""Whole runs on Ray: the instance's run launcher of a cluster deployment (`run_launcher` in dagster.cluster.yaml).

dagster-ray's `RayRunLauncher` submits each run as one Ray job (`python -m dagster api execute_run ...`, the run's
whole process) to the head's job server, placed by the launcher's `num_cpus`/`resources` on a node that has them.
This subclass adds what the project needs on top:

- every Ray job of the project gets the same variables (`awm_resources.settings.ray_forwarded_env`: `AWM_*`,
  `DAGSTER_HOME`, `DAGSTER_PG_*`, `HF_*`, provider keys), read from the launching process (daemon, UI or
  `awm synth --cluster`) when a run is launched, besides the launcher's own `env_vars`;
- the run's command starts with the interpreter of its code location (`<venv>/bin/python -m dagster`, the same
  path on every node), never a bare `dagster`: the code server the daemon starts reports that entry point, and a
  Ray job's PATH need not hold it (the job then fails with exit code 127); each argument is shell-quoted;
- the Ray node a run's job runs on is recorded as the run's tag `awm/ray_node_id` (the UI shows it);
- a run whose job died with its node is reported with Ray's own reason, so run monitoring marks it failed with
  it (and `run_retries` re-executes it from its failed steps, on the remaining nodes).

It is imported by every process that loads the instance (daemon, UI, each run's process): nothing heavy here.
"""

from __future__ import annotations

import shlex
from typing import Any

import dagster as dg
from dagster._core.launcher import LaunchRunContext, ResumeRunContext
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.origin import get_python_environment_entry_point
from dagster._grpc.types import ExecuteRunArgs, ResumeRunArgs
from dagster_ray.core.run_launcher import RayRunLauncher, get_job_submission_id_from_run_id

from awm_resources.settings import ray_forwarded_env

RAY_NODE_TAG = "awm/ray_node_id"


def run_submission_id(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """The Ray job of the run's current attempt (dagster-ray names it after the run and its resume attempt)."""
    return get_job_submission_id_from_run_id(run.run_id, resume_attempt_number=instance.count_resume_run_attempts(run.run_id))


def run_command(args: ExecuteRunArgs | ResumeRunArgs) -> str:
    """The shell command of a run (Ray jobs take a shell line), started by its origin's own interpreter."""
    origin = args.job_origin
    argv = list(args.get_command_args())
    entry = list(origin.repository_origin.entry_point or [])
    if entry == ["dagster"]:
        argv = [*get_python_environment_entry_point(origin.executable_path), *argv[len(entry):]]
    return " ".join(shlex.quote(a) for a in argv)


class AwmRayRunLauncher(RayRunLauncher):
    """`RayRunLauncher` with the project's forwarded variables, the run's node recorded and node loss explained."""

    @property  # an attribute in the base class, assigned by its __init__ (through the setter below)
    def env_vars(self) -> list[str]:
        """The configured names (or KEY=VALUE), then the project's forwarded variables (values read at launch)."""
        return [*(self._configured_env_vars or []), *ray_forwarded_env()]

    @env_vars.setter
    def env_vars(self, value: list[str] | None) -> None:
        self._configured_env_vars = value

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if run.tags.get(RAY_NODE_TAG):  # a retry copies its parent's tags: not where this run will go
            self._instance.add_run_tags(run.run_id, {RAY_NODE_TAG: ""})
        args = ExecuteRunArgs(job_origin=dg._check.not_none(run.job_code_origin), run_id=run.run_id,
                              instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True)
        self._launch_ray_job(get_job_submission_id_from_run_id(run.run_id), run_command(args), run)

    def resume_run(self, context: ResumeRunContext) -> None:
        run = context.dagster_run
        args = ResumeRunArgs(job_origin=dg._check.not_none(run.job_code_origin), run_id=run.run_id,
                             instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True)
        submission_id = get_job_submission_id_from_run_id(run.run_id, resume_attempt_number=context.resume_attempt_number)
        self._launch_ray_job(submission_id, run_command(args), run)

    def record_node(self, run: dg.DagsterRun, job_info: Any = None) -> str | None:
        """Tag the run with the node its job's driver (the run's process) runs on, once Ray knows it; the node
        (None while unknown; the tag is empty then)."""
        if job_info is None:
            try:
                job_info = self.client.get_job_info(run_submission_id(self._instance, run))
            except RuntimeError:  # no such job (yet) or the job server is unreachable
                return run.tags.get(RAY_NODE_TAG)
        node = getattr(job_info, "driver_node_id", None)
        if node and run.tags.get(RAY_NODE_TAG) != node:
            self._instance.add_run_tags(run.run_id, {RAY_NODE_TAG: node})
        return node or run.tags.get(RAY_NODE_TAG) or None

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        result = super().check_run_worker_health(run)
        if result.status == WorkerStatus.UNKNOWN:
            return result
        try:
            info = self.client.get_job_info(run_submission_id(self._instance, run))
        except RuntimeError:  # the job server is unreachable: the base class's answer stands
            return result
        self.record_node(run, info)
        if result.status != WorkerStatus.FAILED:
            return result
        node = info.driver_node_id or run.tags.get(RAY_NODE_TAG) or "unknown"
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run's Ray job {info.submission_id} is {info.status} "
                                                         f"(node {node}): {info.message}")
