"""`run_worker_watchdog`: fail, with the reason, runs whose code server and worker died with the daemon."""

import json
import socket

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason

from awm_assets.defs.shared.resources import sensor_interval_s
from awm_resources.store import process_alive

# Set on a run by Dagster's DefaultRunLauncher: the code server it was started in ({"host", "socket" | "port"}).
GRPC_INFO_TAG = ".dagster/grpc_info"


def _code_server_gone(info: dict) -> bool:
    """True when the code server a run was launched in no longer listens on this host; False when it still
    does or when it is elsewhere (nothing to judge from here)."""
    try:
        if info.get("socket"):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2)
                sock.connect(info["socket"])
        elif info.get("port") and info.get("host") in ("localhost", "127.0.0.1", "::1"):
            socket.create_connection((info["host"], int(info["port"])), timeout=2).close()
        else:
            return False
    except OSError:
        return True
    return False


def _run_worker(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid of the run's worker process and when it said so ("Started process for run (pid: N)")."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=20).records
    for record in records:
        data = record.event_log_entry.dagster_event.engine_event_data if record.event_log_entry.dagster_event else None
        pid = data.metadata.get("pid") if data else None
        if pid is not None and str(pid.value).isdigit():
            return int(pid.value), record.timestamp
    return None


@dg.sensor(minimum_interval_seconds=max(1, sensor_interval_s() // 2), default_status=dg.DefaultSensorStatus.RUNNING,
           description="Marks failed, with the reason, a starting or started run whose code server and worker "
                       "process are both gone (e.g. the daemon was killed with its process group): Dagster's run "
                       "monitoring cannot check the health of runs launched by the default run launcher, so such a "
                       "run would stay in progress forever and block the catalog refresh. run_retries "
                       "(dagster.yaml) then re-executes it from its failed steps.")
def run_worker_watchdog(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    instance = context.instance
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING,
                                                                     dg.DagsterRunStatus.STARTED])):
        run = record.dagster_run
        info = json.loads(run.tags.get(GRPC_INFO_TAG) or "{}")
        if not info or not _code_server_gone(info):
            # A live code server notices its own workers dying; a run not yet launched is left to start_timeout.
            continue
        worker = _run_worker(instance, run.run_id)
        if worker is not None and process_alive(*worker):
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status != run.status:
            continue
        where = info.get("socket") or f"{info.get('host')}:{info.get('port')}"
        process = (f"its worker process (pid {worker[0]}) exited without reporting an outcome" if worker
                   else "its worker process never reported starting")
        retry = ("run_retries re-executes it from its failed steps" if instance.run_retries_enabled
                 else "re-execute it from its failed steps")
        message = (f"Run worker lost: run {run.run_id} was {run.status.value}, but the code server that launched it "
                   f"({where}) is gone and {process} (the Dagster daemon was killed with its process group, or the "
                   f"machine restarted). Marked failed by run_worker_watchdog; {retry}.")
        instance.report_run_failed(run, message, JobFailureData(
            error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
        context.log.warning(message)
        failed.append(run.run_id)
    return dg.SkipReason(f"marked {len(failed)} lost run(s) failed: {', '.join(failed)}" if failed
                         else "no run lost its worker")
