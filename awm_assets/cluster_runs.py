"""Runs of the code location launched through the Dagster instance's run launcher (whole runs as Ray jobs on the
cluster: `AwmRayRunLauncher`, configured in dagster.cluster.yaml) and waited on, for `awm synth --cluster`.

Runs are created as `dagster job launch` creates them (the code location `awm` of workspace.yaml, loaded in this
process) so the daemon can re-execute them (`run_retries`), and launched directly: Ray queues them by the launcher's
resources, no daemon is needed to start them. A run whose process is lost with its node is marked failed with the
reason here too when no daemon monitors it; when `run_retries` will re-execute it (the daemon does), the wait
follows the retry.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason
from dagster._core.launcher.base import WorkerStatus
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext, WorkspaceRequestContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

from awm_assets.defs.shared.run_launcher import RAY_NODE_TAG, AwmRayRunLauncher
from awm_resources.store import PROJECT_ROOT

LOCATION_NAME = "awm"  # as in workspace.yaml: the daemon finds a failed run's code location by this name
LAUNCHED = {dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED}
TERMINAL = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


class ClusterRunError(RuntimeError):
    """The instance cannot launch runs onto Ray, or a launched run could not be followed to its end."""


def launches_on_ray(instance: dg.DagsterInstance) -> bool:
    return isinstance(instance.run_launcher, AwmRayRunLauncher)


def check_launcher(instance: dg.DagsterInstance) -> None:
    """Cluster mode needs the instance's run launcher to be the Ray one: else a clear error naming the file."""
    launcher = instance.run_launcher
    if not isinstance(launcher, AwmRayRunLauncher):
        raise ClusterRunError(
            f"the Dagster instance at {instance.root_directory} launches runs with {type(launcher).__name__}, not "
            f"on Ray: its dagster.yaml needs the run_launcher section of dagster.cluster.yaml "
            f"(class AwmRayRunLauncher, address of the head's job server)")


@contextmanager
def code_location(instance: dg.DagsterInstance) -> Iterator[WorkspaceRequestContext]:
    """The code location `awm` loaded in this process, its runs started by this interpreter's `python -m dagster`
    on whichever node Ray picks (the project and its venv sit at the same path on every node)."""
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(executable_path=sys.executable, module_name="awm_assets.definitions",
                                                    attribute="defs", working_directory=str(PROJECT_ROOT)),
        location_name=LOCATION_NAME, entry_point=[sys.executable, "-m", "dagster"])
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as process_context:
        context = process_context.create_request_context()
        errors = context.code_location_errors()
        if errors:
            raise ClusterRunError(f"the code location {LOCATION_NAME} did not load: {errors[0].message}")
        yield context


def launch(context: WorkspaceRequestContext, job_name: str, *, partition: str | None = None,
           run_config: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None) -> str:
    """Create a run of the job (as `dagster job launch` does) and hand it to the run launcher; its run id."""
    from dagster._cli.job import _create_run  # private: the `dagster job launch` path (dagster is pinned)

    location = context.get_code_location(LOCATION_NAME)
    repo = next(iter(location.get_repositories().values()))
    all_tags = {**(tags or {}), **({"dagster/partition": partition} if partition else {})}
    run = _create_run(instance=context.instance, code_location=location, remote_repo=repo,
                      remote_job=repo.get_full_job(job_name), run_config=dict(run_config or {}), tags=all_tags,
                      op_selection=None, run_id=None)
    context.instance.launch_run(run.run_id, context)
    return run.run_id


def _mark_lost(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRun:
    """A starting or started run whose Ray job is gone (its node lost) is marked failed with Ray's reason, as
    run monitoring does for a started one; without a daemon nothing else would, and a starting one would wait
    for the start timeout (180 s)."""
    launcher = instance.run_launcher
    if run.status not in LAUNCHED or not isinstance(launcher, AwmRayRunLauncher):
        return run
    health = launcher.check_run_worker_health(run)
    current = instance.get_run_by_id(run.run_id)
    if health.status != WorkerStatus.FAILED or current is None or current.status != run.status:
        return current or run
    instance.report_run_failed(current, f"Run worker lost: {health.msg}", JobFailureData(
        error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
    return instance.get_run_by_id(run.run_id) or current


def wait_for_runs(instance: dg.DagsterInstance, run_ids: list[str], *, timeout_s: float, poll_s: float = 2.0,
                  retry_grace_s: float = 180.0, on_done: Callable[[str, dg.DagsterRun], None] | None = None,
                  ) -> dict[str, dg.DagsterRun]:
    """Wait until every run (or, when run_retries re-executes it, its last retry) has ended; per launched run id,
    the run it ended as. A retry the daemon does not start within `retry_grace_s` ends the wait on the failure."""
    deadline = time.monotonic() + timeout_s
    current = {run_id: run_id for run_id in run_ids}  # launched run -> the run it continues as (its retry)
    done: dict[str, dg.DagsterRun] = {}
    failed_at: dict[str, float] = {}
    while len(done) < len(run_ids):
        for first, run_id in current.items():
            if first in done:
                continue
            run = instance.get_run_by_id(run_id)
            if run is None:
                raise ClusterRunError(f"run {run_id} is not in the instance at {instance.root_directory}")
            run = _mark_lost(instance, run)
            if run.status not in TERMINAL:
                continue
            if run.status == dg.DagsterRunStatus.FAILURE and run.tags.get(WILL_RETRY_TAG) == "true":
                if retry := run.tags.get(AUTO_RETRY_RUN_ID_TAG):
                    current[first] = retry
                    continue
                if time.monotonic() - failed_at.setdefault(run_id, time.monotonic()) < retry_grace_s:
                    continue
            launcher = instance.run_launcher
            if not run.tags.get(RAY_NODE_TAG) and isinstance(launcher, AwmRayRunLauncher) and launcher.record_node(run):
                run = instance.get_run_by_id(run.run_id) or run
            done[first] = run
            if on_done is not None:
                on_done(first, run)
        if len(done) < len(run_ids):
            if time.monotonic() > deadline:
                pending = [current[r] for r in run_ids if r not in done]
                raise ClusterRunError(f"runs {pending} did not end within {timeout_s:.0f} s; see them in the Dagster UI")
            time.sleep(poll_s)
    return done


def run_failures(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """The run's step failures (step: message), else its own failure message."""
    records = instance.get_records_for_run(run.run_id, of_type={dg.DagsterEventType.STEP_FAILURE,
                                                                dg.DagsterEventType.RUN_FAILURE}).records
    out = []
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        if event.is_step_failure:
            error = event.step_failure_data.error
            out.append(f"{event.step_key}: {error.message.strip() if error else 'failed'}")
        elif not out:
            out.append(event.message or "run failed")
    return out
