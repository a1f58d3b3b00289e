"""Provenance: which version of each environment, and which catalog, a run used.

An environment's version is a content digest of the files that define it: its code (`server.py`), database
(`initial.db`), tasks, verifiers and reference solutions. The quality gate keys its stored result by the same
digest, so the catalog reads each version from the gate's result (computed once per content change, never by
hashing every database on a refresh). The catalog's digest covers its ready environments: name, version and the
tasks left out of training. Every catalog the `environment_catalog` asset writes is also kept as
`catalog_versions/<digest>.json`, so a run can train on exactly that set later, once each environment is
checked to be unchanged (`changed_environments`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awm_resources.documents import Catalog, CatalogEntry, DocumentError, dump, read
from awm_resources.store import ArtifactStore, atomic_write_text

# The files an environment's version covers (the quality gate checks exactly these: awm_rl.quality.results).
ENVIRONMENT_FILES = ("server.py", "initial.db", "tasks.json", "verifiers.json", "solutions.json")
VERSIONS_DIR = "catalog_versions"  # relative to the store root
MIN_PREFIX = 6  # a catalog version may be named by a unique prefix of its digest this long or longer


class CatalogVersionError(ValueError):
    """No such catalog version, or the store no longer holds the environments it names: the message says which."""


def environment_digest(store: ArtifactStore, scenario: str) -> str:
    """The content digest of the scenario's environment files (an absent file counts as absent)."""
    h = hashlib.sha256()
    for name in ENVIRONMENT_FILES:
        path = store.path(scenario, name)
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    return h.hexdigest()[:16]


def _fields(entry: CatalogEntry | dict[str, Any]) -> dict[str, Any]:
    return entry if isinstance(entry, dict) else dump(entry)


def recorded_versions(entries: list[CatalogEntry] | list[dict[str, Any]]) -> dict[str, str | None]:
    """Environment -> the version the catalog entry recorded (None: the entry has none, e.g. never checked)."""
    return {f["name"]: f.get("digest") for f in map(_fields, entries)}


def catalog_digest(ready: list[CatalogEntry] | list[dict[str, Any]]) -> str:
    """The digest of a catalog's ready environments: each one's name, version and left-out tasks."""
    rows = sorted((f["name"], f.get("digest"), sorted(f.get("excluded_tasks") or [])) for f in map(_fields, ready))
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def versions_dir(store: ArtifactStore) -> Path:
    return store.root / VERSIONS_DIR


def save_catalog_version(store: ArtifactStore, ready: list[dict[str, Any]]) -> tuple[str, Path]:
    """Keep the catalog of these ready entries as `catalog_versions/<digest>.json` (a `Catalog` document,
    written once per digest); returns the digest and the file."""
    digest = catalog_digest(ready)
    path = versions_dir(store) / f"{digest}.json"
    if not path.is_file():  # same digest, same environments: the first file stays (its written_at too)
        doc = {"digest": digest, "written_at": time.time(), "environments": ready}
        atomic_write_text(path, json.dumps(doc, ensure_ascii=False) + "\n")
    return digest, path


def list_catalog_versions(store: ArtifactStore) -> list[str]:
    """The kept catalog versions' digests, newest first."""
    folder = versions_dir(store)
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob("*.json") if not p.name.startswith(".")]
    return [p.stem for p in sorted(files, key=lambda p: p.stat().st_mtime_ns, reverse=True)]


def catalog_version_path(store: ArtifactStore, digest: str) -> Path:
    """The kept catalog with this digest (or unique prefix of it, at least MIN_PREFIX characters)."""
    known = list_catalog_versions(store)
    matches = [d for d in known if d == digest] or \
        ([d for d in known if d.startswith(digest)] if len(digest) >= MIN_PREFIX else [])
    if len(matches) == 1:
        return versions_dir(store) / f"{matches[0]}.json"
    if len(matches) > 1:
        raise CatalogVersionError(f"catalog version {digest!r} is ambiguous: it starts {', '.join(matches)}")
    shown = ", ".join(known[:10]) + (f" (and {len(known) - 10} older)" if len(known) > 10 else "")
    raise CatalogVersionError(f"no catalog version {digest!r} in {versions_dir(store)} (kept, newest first: "
                              f"{shown or 'none; materialize environment_catalog or run `awm catalog --refresh`'})")


def describe_catalog_versions(store: ArtifactStore) -> list[dict[str, Any]]:
    """The kept catalog versions, newest first (`awm catalog --versions`): digest, when it was kept, how many
    environments and tasks left to train on, whether it is the current catalog's, and each environment whose version differs from
    the current catalog's (`changed_vs_current`: `version` here, `current` there; None where one of the two has
    no such environment; the whole list None before any catalog.json). A kept file that cannot be read is listed with its `problem`, never skipped."""
    current = store.catalog()
    now = recorded_versions(current.ready()) if current is not None else None
    out: list[dict[str, Any]] = []
    for digest in list_catalog_versions(store):
        path = versions_dir(store) / f"{digest}.json"
        row: dict[str, Any] = {"digest": digest, "file": str(path)}
        try:
            doc = read(Catalog, path)
        except (DocumentError, OSError) as exc:
            out.append({**row, "problem": str(exc)})
            continue
        kept = (doc.model_extra or {}).get("written_at")
        when = kept if isinstance(kept, (int, float)) else path.stat().st_mtime
        versions = recorded_versions(doc.ready())
        changed = None if now is None else [
            {"environment": name, "version": versions.get(name), "current": now.get(name)}
            for name in sorted(set(versions) | set(now))
            if (name in versions) != (name in now) or versions.get(name) != now.get(name)]
        out.append({**row, "kept_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
                    "environments": len(versions),
                    "trainable_tasks": sum(e.tasks - len(e.excluded_tasks) for e in doc.ready()),
                    "current": current is not None and current.digest == digest, "changed_vs_current": changed})
    return out


@dataclass(frozen=True)
class EnvironmentChange:
    """An environment whose files differ from the version recorded (current None: no longer in the store)."""

    scenario: str
    recorded: str | None
    current: str | None

    def __str__(self) -> str:
        return f"{self.scenario}: {self.recorded or 'unrecorded'} -> {self.current or 'missing'}"


def current_versions(store: ArtifactStore, scenarios: list[str]) -> dict[str, str | None]:
    """Each scenario's version as its files are now (None: the store has no such scenario)."""
    present = set(store.list_scenarios())
    return {s: environment_digest(store, s) if s in present else None for s in scenarios}


def changed_environments(store: ArtifactStore, recorded: dict[str, str | None]) -> list[EnvironmentChange]:
    """The environments whose files are no longer those of the recorded versions (removed ones included)."""
    now = current_versions(store, sorted(recorded))
    return [EnvironmentChange(s, recorded[s], now[s]) for s in sorted(recorded) if recorded[s] != now[s]]


def verify_catalog_version(store: ArtifactStore, digest: str, scenarios: list[str] | None = None) -> Path:
    """The kept catalog `digest` names (see `catalog_version_path`), once every environment it recorded (or
    those of `scenarios`, a run's selection) is checked to be unchanged; else CatalogVersionError listing each
    change (`scenario: recorded -> current | missing`)."""
    path = catalog_version_path(store, digest)
    try:
        ready = read(Catalog, path).ready()
    except (DocumentError, OSError) as exc:
        raise CatalogVersionError(f"catalog version {digest}: {exc}") from None
    recorded = recorded_versions(ready)
    if scenarios is not None:
        recorded = {s: v for s, v in recorded.items() if s in scenarios}
    changes = changed_environments(store, recorded)
    if changes:
        raise CatalogVersionError(
            f"catalog version {path.stem}: {len(changes)} of the {len(recorded)} environment(s) to train on changed "
            "since it was kept (repaired, re-imported or removed), so it cannot be trained on exactly:\n  "
            + "\n  ".join(map(str, changes)))
    return path


def run_provenance(store: ArtifactStore, scenarios: list[str],
                   catalog: list[CatalogEntry] | list[dict[str, Any]] | None) -> dict[str, Any]:
    """What a run records: the digest of the catalog it read (None: no catalog), every environment it used
    with its version now, and those whose version differs from the one the catalog recorded (changed after the
    refresh)."""
    recorded = recorded_versions(catalog or [])
    now = current_versions(store, sorted(scenarios))
    changed = [str(EnvironmentChange(s, recorded[s], v)) for s, v in now.items()
               if recorded.get(s) is not None and recorded[s] != v]
    return {"catalog_digest": catalog_digest(catalog) if catalog is not None else None, "environments": now,
            "changed_since_catalog": changed}
