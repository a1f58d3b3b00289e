"""Run by tests/cluster/test_two_node.py in its own process (cluster mode is chosen when the code location
loads, so it needs a fresh interpreter): the demo batch's scenario generation, then the stages of the scenarios
named after the seed file (default: all of them) as Ray jobs through dagster-ray, then environment instances
served by hosts placed on the worker node. Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import dagster as dg


def main() -> None:
    from awm_assets.defs.shared.executors import cluster_mode, reconstructable_job
    from awm_assets.defs.shared.partitions import scenario_partitions, seed_batch_partitions
    from awm_assets.defs.synthesis.sensors import batch_run_config
    from awm_assets.synthesis.seeds import read_seed_batch

    assert cluster_mode(), "AWM_EXECUTOR=ray expected"
    seed_file = Path(sys.argv[1])
    out: dict = {"runs": {}, "seconds": {}}
    instance = dg.DagsterInstance.get()  # $DAGSTER_HOME: on the shared filesystem, as the steps need it
    batch = read_seed_batch(seed_file)
    instance.add_dynamic_partitions(seed_batch_partitions.name, [batch.key])

    t0 = time.monotonic()
    gen = dg.execute_job(reconstructable_job("generate_scenarios"), instance, run_config=batch_run_config(seed_file),
                         tags={"dagster/partition": batch.key})
    out["runs"]["generate_scenarios"] = {"run_id": gen.run_id, "success": gen.success}
    out["seconds"]["generate"] = round(time.monotonic() - t0, 1)
    if not gen.success:
        raise SystemExit(f"scenario generation failed on the cluster: {out}")
    scenarios = sorted(instance.get_dynamic_partitions(scenario_partitions.name))
    out["scenarios"] = scenarios
    synthesized = sys.argv[2:] or scenarios
    out["synthesized"] = synthesized

    t0 = time.monotonic()
    for key in synthesized:
        res = dg.execute_job(reconstructable_job("synthesize_scenario"), instance, tags={"dagster/partition": key})
        out["runs"][key] = {"run_id": res.run_id, "success": res.success}
    out["seconds"]["stages"] = round(time.monotonic() - t0, 1)

    t0 = time.monotonic()
    cat = dg.execute_job(reconstructable_job("refresh_catalog"), instance)
    out["runs"]["refresh_catalog"] = {"run_id": cat.run_id, "success": cat.success}
    out["seconds"]["catalog"] = round(time.monotonic() - t0, 1)

    t0 = time.monotonic()
    out["serving"] = serve(synthesized[0])
    out["seconds"]["serving"] = round(time.monotonic() - t0, 1)
    print("DRIVE-RESULT " + json.dumps(out), flush=True)


def serve(scenario: str) -> dict:
    """Hosts placed on the worker node by its custom resource; snapshots land in the shared store (the pool's
    default on a cluster of more than one node)."""
    import ray
    from ray.util.state import list_actors

    from awm_resources.store import ArtifactStore
    from awm_rl.runtime.pool import EnvironmentPool

    store = ArtifactStore()
    with EnvironmentPool(store.root, num_hosts=2, prefetch=0, ray_address=os.environ["RAY_ADDRESS"],
                         actor_options={"resources": {"worker_node": 0.01}}) as pool:
        h = pool.acquire(scenario)
        tools = pool.list_tools(h)
        listing = next(t for t in tools if not (t.get("input_schema") or {}).get("required"))
        result = pool.call_tool(h, listing["name"], {})
        initial, final = pool.snapshot(h)
        info = {"tools": len(tools), "called": listing["name"], "call_ok": result.ok, "call_status": result.status,
                "snapshot_initial": str(initial), "snapshot_final": str(final),
                "snapshot_bytes": final.stat().st_size if final.is_file() else 0}
        pool.release(h)
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        hosts = [a for a in list_actors(filters=[("state", "=", "ALIVE")]) if "Host" in a.class_name]
        info["host_nodes"] = sorted({a.node_id for a in hosts})
        info["host_classes"] = sorted({a.class_name for a in hosts})
        info["worker_node_ids"] = sorted(n for n, r in nodes.items() if r.get("worker_node"))
        info["head_node_ids"] = sorted(n for n, r in nodes.items() if r.get("head_node"))
    return info


if __name__ == "__main__":
    main()
