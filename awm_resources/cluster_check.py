"""What every node of a Ray cluster must share, checked once when cluster mode starts, with an error naming what
is missing on which node.

Nothing is copied between nodes by this project: Dagster steps and runs, env hosts and the trainer open, on
whatever node they land, the artifact store (`AWM_HOME`), the Dagster instance (`DAGSTER_HOME`: its dagster.yaml
and, with SQLite, its storage) and the project with its virtual environment, at the driver's absolute paths. A node
without one of them fails later in ways that do not say so (a step that cannot import the project, a store that
looks empty because it is a local folder of the same name). So a tiny Ray task runs on every alive node (pinned to
it with `NodeAffinitySchedulingStrategy`) and checks each path there: that it exists, that a folder meant for
writing takes a file, and, for the store and the instance, that a marker file the driver has just written is
visible there (the same store, not a copy).
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER_PREFIX = ".awm-shared-check-"


class SharedStoreError(RuntimeError):
    """Some node lacks a path every node must share; the message names each node and path."""


@dataclass(frozen=True)
class SharedPath:
    what: str  # e.g. "the artifact store (AWM_HOME)"
    path: str  # absolute, as the driver sees it
    writable: bool = False  # a folder the node must write into
    marker: bool = False  # must be the driver's folder itself: the driver's marker file is read back there
    executable: bool = False  # a program the node runs (the venv's interpreter)


def required_paths(environ: dict[str, str] | None = None) -> list[SharedPath]:
    """The paths of this process that every node needs: the artifact store, the Dagster instance (when
    `DAGSTER_HOME` is set: every Dagster process sets it), the project and the interpreter of its venv."""
    from awm_resources.store import PROJECT_ROOT, default_home

    env = os.environ if environ is None else environ
    paths = [SharedPath("the artifact store (AWM_HOME)", str(default_home()), writable=True, marker=True)]
    if env.get("DAGSTER_HOME"):
        paths.append(SharedPath("the Dagster instance (DAGSTER_HOME)", str(Path(env["DAGSTER_HOME"]).resolve()),
                                writable=True, marker=True))
    paths.append(SharedPath("the project", str(PROJECT_ROOT)))
    paths.append(SharedPath("the project's Python (its virtual environment)", sys.executable, executable=True))
    return paths


def check_paths(paths: list[SharedPath], token: str) -> list[str]:
    """What is wrong with `paths` on this node (empty: nothing). Runs on every node; only the standard library."""
    problems = []
    for p in paths:
        where = f"{p.what} {p.path}"
        if not os.path.exists(p.path):
            problems.append(f"{where} does not exist")
            continue
        if p.executable and not os.access(p.path, os.X_OK):
            problems.append(f"{where} is not executable")
        if p.writable:
            probe = os.path.join(p.path, f"{MARKER_PREFIX}{token}-{os.getpid()}.probe")
            try:
                with open(probe, "w") as fh:
                    fh.write(token)
                os.remove(probe)
            except OSError as exc:
                problems.append(f"{where} is not writable ({exc.strerror})")
        if p.marker:
            try:
                with open(os.path.join(p.path, MARKER_PREFIX + token)) as fh:
                    same = fh.read() == token
            except OSError:
                same = False
            if not same:
                problems.append(f"{where} is not the driver's: its marker file is not there (a local folder "
                                "of the same path, not the shared one)")
    return problems


def _node_name(node: dict[str, Any]) -> str:
    return f"node {node['NodeID'][:12]} ({node.get('NodeManagerAddress') or '?'})"


def check_shared_store(paths: list[SharedPath] | None = None, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """Check `paths` (default `required_paths()`) on every alive node of the connected Ray cluster; raises
    SharedStoreError naming every node and path that is missing, and returns {"nodes", "paths"} otherwise."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    paths = required_paths() if paths is None else paths
    token = secrets.token_hex(8)
    markers: list[Path] = []
    problems: list[str] = []
    try:
        for p in (p for p in paths if p.marker):
            marker = Path(p.path) / (MARKER_PREFIX + token)
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)  # as the store itself would
                marker.write_text(token)
            except OSError as exc:
                raise SharedStoreError(f"on the driver: {p.what} {p.path} cannot hold the check's marker file "
                                       f"({exc.strerror})") from exc
            markers.append(marker)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        # This module by value: the check needs only the standard library on a node, so a node without the
        # project still answers (and says the project is missing) instead of failing to import it.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        remote = ray.remote(num_cpus=0, max_retries=0)(_check_on_node)
        refs = {remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            [vars(p) for p in paths], token): n for n in nodes}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref, node in refs.items():
            if ref not in ready:
                problems.append(f"{_node_name(node)}: the check did not answer within {timeout_s:.0f} s")
                ray.cancel(ref, force=True)
                continue
            try:
                found = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - any failure there is that node's finding, reported as such
                problems.append(f"{_node_name(node)}: the check could not run there ({type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''})")
                continue
            problems += [f"{_node_name(node)}: {p}" for p in found]
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)
    if problems:
        raise SharedStoreError("not every node of the Ray cluster shares what cluster mode needs at the same absolute "
                               "paths (docs/cluster.md, 'What every node shares'):\n  " + "\n  ".join(problems))
    return {"nodes": [_node_name(n) for n in nodes], "paths": [p.path for p in paths]}


def _check_on_node(paths: list[dict[str, Any]], token: str) -> list[str]:
    """The Ray task: `check_paths` on this node, from plain dicts (no import of this project needed)."""
    return check_paths([SharedPath(**p) for p in paths], token)
