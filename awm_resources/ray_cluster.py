"""Connect to Ray: the cluster at `address` / `$RAY_ADDRESS`, else a quiet local one (idempotent).

One small function instead of dagster-ray (whose resources pull in ray.data): the Dagster resource,
the environment pool and the trainer all call `init_ray()` and get the same connection.
"""

from __future__ import annotations

import logging
import os
from typing import Any


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> dict[str, Any]:
    """Connect (or start locally) once per process; returns {"address", "started_local", "num_cpus", ...}."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        return {"address": ctx.gcs_address, "started_local": False, "already_connected": True,
                "num_cpus": ray.cluster_resources().get("CPU"), "namespace": ctx.namespace}
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ctx = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
        started_local = False
        _check_shared_store(address)
    else:
        # A local cluster started here needs no token (Ray 2.60 turns token auth on by default).
        os.environ["RAY_AUTH_MODE"] = "disabled"
        ctx = ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
                       log_to_driver=True, configure_logging=True)
        started_local = True
    info = {"address": ctx.address_info.get("gcs_address") if hasattr(ctx, "address_info") else None,
            "started_local": started_local, "already_connected": False,
            "num_cpus": ray.cluster_resources().get("CPU"), "namespace": ray.get_runtime_context().namespace}
    return info


def _check_shared_store(address: str) -> None:
    """Cluster mode starts: every node must share the store, the instance and the project (cluster_check.py).
    Not inside a Ray job (its submitter checked), nor through Ray Client (ray://: this process's files are on
    another machine than the cluster's), nor with AWM_CLUSTER_CHECK=off."""
    from awm_resources.settings import load_settings

    if (os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or address.startswith("ray://")
            or not load_settings().cluster.shared_check):
        return
    import ray

    from awm_resources.cluster_check import check_shared_store

    try:
        check_shared_store()
    except Exception:
        ray.shutdown()  # not half-connected: the next init_ray checks again
        raise
