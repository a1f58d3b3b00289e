"""Executors; cluster mode: the synthesis steps run as Ray jobs on the cluster that hosts the environments.

Selected by configuration, local by default:

- `AWM_EXECUTOR=local` (default): the project's jobs (`generate_scenarios`, `synthesize_scenario`,
  `refresh_catalog`) run their steps in the run's process: their steps follow one another, so a process per
  step would only add an interpreter start (importing Dagster and the code location, ~3 s of CPU) to each.
  Other runs (the catalog automation's, asset runs from the UI) use Dagster's multiprocess executor started
  by fork from a forkserver that imported the code location once (`LOCAL_MULTIPROCESS`), not by spawn.
- `AWM_EXECUTOR=ray`: every step of `generate_scenarios`, `synthesize_scenario`, `refresh_catalog` and of
  runs launched by the catalog automation or from the UI is submitted as a Ray job through dagster-ray's
  `ray_executor` (`dagster api execute_step` on some node; the run's own process only orchestrates).

What every node must share (nothing is copied between nodes by us):
- the artifact store (`AWM_HOME`) and the Dagster instance (`DAGSTER_HOME` with its storage), at the
  same absolute paths, and the project with its virtual environment (the step command is this
  interpreter's `python -m dagster ...`);
- both variables travel with each step, as do the other settings the steps read (below).

Knobs (environment, read when the code location loads):
- `AWM_RAY_JOBS_ADDRESS`: the head's job server, e.g. `http://head:8265`; default: `RAY_API_SERVER_ADDRESS`,
  else port 8265 on the host of `RAY_ADDRESS` (see `jobs_address()`). The head needs `ray[default]`.
- `AWM_RAY_STEP_CPUS` (default 1): CPUs each step reserves. With 0 Ray runs every step on the head node.
- `AWM_RAY_STEP_RESOURCES`: JSON of custom resources a step needs, e.g. `{"cpu_worker": 1}` to keep the
  steps off GPU nodes.
- `AWM_RAY_STEP_ENV`: comma-separated extra variable names to forward to the steps.
"""

from __future__ import annotations

import os
import sys

import dagster as dg
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.definitions.reconstruct import ReconstructableRepository

from awm_resources.settings import load_settings, ray_forwarded_env


def executor_mode() -> str:
    """`AWM_EXECUTOR`: local or ray (awm_resources.settings checks it)."""
    return load_settings().cluster.executor


def cluster_mode() -> bool:
    return executor_mode() == "ray"


def forwarded_env() -> list[str]:
    """Names of the variables forwarded to each step (values are read at launch): the one list of
    awm_resources.settings.ray_forwarded_env. Credentials among them show in the Ray dashboard's job details."""
    return list(ray_forwarded_env())


def jobs_address() -> str | None:
    """The head's job server: `AWM_RAY_JOBS_ADDRESS`, else `RAY_API_SERVER_ADDRESS`, else port 8265 on the host of
    a `host:port` `RAY_ADDRESS` (the GCS port is not the job server's), else None (Ray's default, 127.0.0.1:8265)."""
    if address := load_settings().cluster.ray_jobs_address or os.environ.get("RAY_API_SERVER_ADDRESS"):
        return address
    gcs = os.environ.get("RAY_ADDRESS") or ""
    if gcs and "://" not in gcs and gcs != "auto":
        return f"http://{gcs.rsplit(':', 1)[0]}:8265"
    if gcs.startswith(("http://", "https://")):
        return gcs
    return None


def ray_executor_config() -> dict:
    cluster = load_settings().cluster
    resources, cpus = cluster.ray_step_resources, cluster.ray_step_cpus
    ray_cfg: dict = {"env_vars": forwarded_env()}
    if address := jobs_address():
        ray_cfg["address"] = address
    if cpus:
        ray_cfg["num_cpus"] = cpus
    if resources:
        ray_cfg["resources"] = {k: float(v) for k, v in resources.items()}
    return {"ray": ray_cfg}


def cluster_executor() -> dg.ExecutorDefinition:
    from dagster_ray import ray_executor

    return ray_executor.configured(ray_executor_config(), name="ray_cluster")


# Steps in processes forked from one forkserver per run, which preloads the module the job was loaded from
# (the code location): a step starts in milliseconds instead of re-importing everything as a spawned one does.
LOCAL_MULTIPROCESS = dg.multiprocess_executor.configured({"start_method": {"forkserver": {}}},
                                                         name="multiprocess_forkserver")


def job_executor(local: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """The executor of a job: `local` unless cluster mode is selected."""
    return cluster_executor() if cluster_mode() else local


def default_executor() -> dg.ExecutorDefinition:
    """The code location's default executor (asset runs of the automation and the UI)."""
    return cluster_executor() if cluster_mode() else LOCAL_MULTIPROCESS


def reconstructable_job(name: str):
    """A job of the code location (`awm_assets.definitions`) for `dg.execute_job`, as the daemon loads it:
    step processes on other nodes reload it by module name, so it launches runs whose steps go to the
    cluster from a script or test without the daemon."""
    # This interpreter's `python -m dagster` (as a code server launches it), not whatever `dagster` is first
    # on the PATH of the Ray node's job (often none).
    repo = ReconstructableRepository(ModuleCodePointer("awm_assets.definitions", "defs", working_directory=None),
                                     executable_path=sys.executable, entry_point=[sys.executable, "-m", "dagster"])
    return repo.get_reconstructable_job(name)
