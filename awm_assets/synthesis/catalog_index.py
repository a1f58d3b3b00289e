"""What the catalog group reads from each scenario, kept beside a stamp of the scenario's files so that a
refresh re-reads (and re-checks) only the scenarios whose files changed since the last one.

Why: at AWM-1K size, reading every scenario's statuses, attempts and quality result costs seconds on each
`awm catalog --refresh`, while one new scenario changes one entry. The stamp is the name, size and mtime of
every file in the scenario folder, its `status/` and `attempts/<stage>/` (everything the entry, the quality
gate's inputs and the statistics read; every store write renames a new file into place). A snapshot taken
within `RACY_S` of a file's mtime is not trusted the next time (a rewrite within the clock's tick keeps the
mtime). The index is dropped when the store moved or this code changed. Each output of the group records the
index state it was written from, so `awm catalog --refresh` can tell, from the stamps alone, that a run would
write the same files again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from awm_assets.synthesis.catalog_entry import catalog_entry
from awm_assets.synthesis.statistics import scenario_record
from awm_resources.store import STAGES, ArtifactStore, atomic_write_text
from awm_rl.quality.results import judge_label, stored_quality

INDEX_FILE = ".catalog_index.json"
# Which index state each catalog-group output was written from (`mark_written`, `catalog_current`).
WRITTEN_FILE = ".catalog_written.json"
# A file written this close before its snapshot may be rewritten unseen (same size, same mtime tick): the
# snapshot is taken again next time. Two seconds where mtimes are whole seconds (coarse filesystems).
RACY_S = 0.05
RACY_COARSE_S = 2.0
# The last refresh of this process: (store root, refresh id, judge label) -> snapshots. The assets of one
# `refresh_catalog` run pass its run id, so the three describe one snapshot of the store, taken once.
_LAST: dict[tuple[str, str, str | None], dict[str, dict[str, Any]]] = {}
# The modules whose output a snapshot holds: a change to any makes every snapshot stale.
_SOURCES = ("catalog_entry.py", "catalog_index.py", "statistics.py")


def scenario_stamp(folder: Path) -> tuple[str, int]:
    """A digest of (path, size, mtime_ns) of the scenario's files, and the newest mtime_ns among them."""
    found: list[tuple] = []
    newest = 0
    todo = [""]
    while todo:
        rel = todo.pop()
        try:
            listing = os.scandir(os.path.join(folder, rel) if rel else folder)
        except (FileNotFoundError, NotADirectoryError):
            found.append((rel, "missing"))
            continue
        with listing:
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    if rel == "attempts" or (not rel and entry.name in ("status", "attempts")):
                        todo.append(f"{rel}/{entry.name}" if rel else entry.name)
                    continue
                st = entry.stat(follow_symlinks=False)
                newest = max(newest, st.st_mtime_ns)
                found.append((rel, entry.name, st.st_size, st.st_mtime_ns))
    found.sort()
    return hashlib.blake2b(repr(found).encode(), digest_size=16).hexdigest(), newest


def compact_quality(result: dict[str, Any]) -> dict[str, Any]:
    """A quality result without the per-tool reports and task reasons: what the totals and the summary table
    read (the full result stays in the scenario's quality.json)."""
    out = {k: v for k, v in result.items() if k not in ("tools", "tasks", "file_stats")}
    out["tasks"] = [{k: t.get(k) for k in ("task_idx", "eligible", "verdict", "solvable")}
                    for t in result.get("tasks", [])]
    return out


def _code_digest() -> str:
    here = Path(__file__).parent
    return hashlib.blake2b(b"".join((here / name).read_bytes() for name in _SOURCES), digest_size=8).hexdigest()


def _header(store: ArtifactStore) -> dict[str, str]:
    return {"root": str(store.root), "code": _code_digest()}


def load_index(store: ArtifactStore) -> dict[str, dict[str, Any]]:
    """The snapshots of the last refresh (scenario -> snapshot), or none when the index is missing,
    unreadable, of another store root or of other code."""
    try:
        data = json.loads((store.root / INDEX_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data.get("scenarios", {}) if data.get("header") == _header(store) else {}


def save_index(store: ArtifactStore, snapshots: dict[str, dict[str, Any]]) -> None:
    atomic_write_text(store.root / INDEX_FILE,
                      json.dumps({"header": _header(store), "scenarios": snapshots}, ensure_ascii=False) + "\n")


def _reusable(snapshot: dict[str, Any] | None, stamp: str, judge_label: str | None) -> bool:
    if snapshot is None or snapshot.get("racy") or snapshot["stamp"] != stamp:
        return False
    quality = snapshot.get("quality")
    return judge_label is None or quality is None or quality.get("judge") == judge_label


def _checked(store: ArtifactStore, key: str, judge: Any | None) -> dict[str, Any]:
    from awm_rl.quality.gate import scenario_quality  # the gate's modules: only when something is to check

    return scenario_quality(store, key, judge=judge)


def _racy(newest_ns: int, started: float) -> bool:
    window = RACY_COARSE_S if newest_ns % 1_000_000_000 == 0 else RACY_S
    return newest_ns >= (started - window) * 1e9


def take_snapshot(store: ArtifactStore, key: str, quality_result: dict[str, Any] | None,
                  stamp: tuple[str, int], started: float) -> dict[str, Any]:
    """Everything the catalog group reads from one scenario, under the stamp taken before reading it."""
    return {"stamp": stamp[0], "racy": _racy(stamp[1], started),
            **scenario_record(store, key),
            "entry": catalog_entry(store, key, quality_result),
            "quality": compact_quality(quality_result) if quality_result is not None else None}


def _taken(store: ArtifactStore, refresh_id: str | None, label: str | None) -> dict[str, dict[str, Any]] | None:
    """The snapshots this process took for the same refresh (any judge's when `label` is None)."""
    if refresh_id is None:
        return None
    return next((v for (root, rid, lab), v in _LAST.items()
                 if root == str(store.root) and rid == refresh_id and label in (None, lab)), None)


def statistics_records(store: ArtifactStore, refresh_id: str | None = None) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Per scenario its batch, completeness and stage records (what `synthesis_statistics` reads): those of
    this refresh if taken already, else from the index where the scenario is unchanged, else read now; and
    the state they were read from (`state_token`). Runs no check and writes nothing."""
    if (taken := _taken(store, refresh_id, None)) is not None:
        return {key: {k: s[k] for k in ("batch", "complete", "stages")} for key, s in taken.items()}, \
            state_token(store, taken)
    started = time.time()
    old = load_index(store)
    out, stamps = {}, {}
    for key in store.list_scenarios():
        snapshot = old.get(key)
        stamp = scenario_stamp(store.scenario_dir(key))
        if not _reusable(snapshot, stamp[0], None):
            snapshot = {**scenario_record(store, key), "stamp": stamp[0], "racy": _racy(stamp[1], started)}
        out[key] = {k: snapshot[k] for k in ("batch", "complete", "stages")}
        stamps[key] = snapshot
    return out, state_token(store, stamps)


def state_token(store: ArtifactStore, snapshots: dict[str, dict[str, Any]]) -> str | None:
    """A digest of every scenario's stamp and the batch records: equal tokens, equal catalog-group outputs
    (None while a snapshot is racy)."""
    if any(s.get("racy") for s in snapshots.values()):
        return None
    batches = []
    with contextlib.suppress(FileNotFoundError), os.scandir(store.root / "batches") as listing:
        batches = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in listing)
    data = repr(([(k, s["stamp"]) for k, s in snapshots.items()], batches)).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _file_stat(path: Path) -> list | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def mark_written(store: ArtifactStore, output: str, token: str | None, judge_label: str | None = None) -> None:
    """Record that `output` (a file in the store root) was just written from the state `token`."""
    path = store.root / WRITTEN_FILE
    try:
        marks = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        marks = {}
    marks[output] = {"token": token, "judge": judge_label, "file": _file_stat(store.root / output)}
    atomic_write_text(path, json.dumps(marks) + "\n")


def catalog_current(store: ArtifactStore, outputs: dict[str, str | None]) -> bool:
    """Every one of `outputs` (file -> the judge label it must have been written with) was written from the
    store's current state (same stamps, nothing racy, the file untouched since): a refresh would write the
    same files again."""
    try:
        marks = json.loads((store.root / WRITTEN_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return False
    if not all(marks.get(o, {}).get("token") and marks[o]["file"] == _file_stat(store.root / o) for o in outputs):
        return False
    old = load_index(store)
    keys = store.list_scenarios()
    if set(keys) != set(old) or any(scenario_stamp(store.scenario_dir(k))[0] != old[k]["stamp"] for k in keys):
        return False
    token = state_token(store, {k: old[k] for k in keys})
    return all(marks[o]["token"] == token and marks[o]["judge"] == label for o, label in outputs.items())


def run_token(store: ArtifactStore, refresh_id: str) -> str | None:
    """The state the snapshots of this refresh were taken from (None if none were taken in this process)."""
    taken = _taken(store, refresh_id, None)
    return None if taken is None else state_token(store, taken)


def refresh_index(store: ArtifactStore, judge: Any | None = None, refresh_id: str | None = None) -> dict[str, dict[str, Any]]:
    """Every scenario's snapshot (in `list_scenarios` order), taken again where the scenario's files changed
    since the last refresh; for a complete one the quality gate runs then (its stored result reused while
    the checked files are unchanged; with a `judge`, only a result that judge confirmed). Called again with
    the same `refresh_id` in this process, the same snapshots."""
    started = time.time()
    label = judge_label(judge)
    if (taken := _taken(store, refresh_id, label)) is not None:
        return taken
    old = load_index(store)
    keys = store.list_scenarios()
    out: dict[str, dict[str, Any]] = {}
    changed = False
    for key in keys:
        stamp = scenario_stamp(store.scenario_dir(key))
        if _reusable(old.get(key), stamp[0], label):
            out[key] = old[key]
            continue
        changed = True
        result = None
        if set(STAGES) <= set(store.present_stages(key)):
            result = stored_quality(store, key, judge) or _checked(store, key, judge)
            stamp = scenario_stamp(store.scenario_dir(key))  # the gate may have written quality.json
        out[key] = take_snapshot(store, key, result, stamp, started)
    if changed or set(old) != set(out):
        save_index(store, out)
    if refresh_id is not None:
        _LAST.clear()
        _LAST[(str(store.root), refresh_id, label)] = out
    return out
