"""Seed batches: a file of seed names, JSONL (`{"name", "description"?}`) or one name per line."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from awm_resources.names import normalize_scenario_name
from awm_resources.store import PROJECT_ROOT

SEED_SUFFIXES = (".jsonl", ".txt")
DEFAULT_SEED_DIR = PROJECT_ROOT / "seeds"


class SeedFileError(ValueError):
    """A seed file that cannot be used; names the file and line."""


@dataclass(frozen=True)
class SeedBatch:
    key: str  # partition key: normalised file stem
    path: Path
    seeds: tuple[dict, ...]
    digest: str


def batch_key(path: Path) -> str:
    return normalize_scenario_name(path.stem)


def read_seed_batch(path: Path | str) -> SeedBatch:
    """Parse a seed file; every problem is reported with its line number, nothing is guessed."""
    path = Path(path)
    if not path.is_file():
        raise SeedFileError(f"seed file {path} does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SeedFileError(f"{path}: not UTF-8 text ({exc})") from None
    seeds: list[dict] = []
    problems: list[str] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if path.suffix == ".jsonl" or line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path.name}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
                problems.append(f"{path.name}:{lineno}: a seed needs a non-empty string 'name'")
                continue
            seed = {"name": obj["name"].strip()}
            if isinstance(obj.get("description"), str) and obj["description"].strip():
                seed["description"] = obj["description"].strip()
        else:
            seed = {"name": line}
        if seed["name"].lower() in seen:
            problems.append(f"{path.name}:{lineno}: duplicate seed {seed['name']!r}")
            continue
        seen.add(seed["name"].lower())
        seeds.append(seed)
    if problems:
        raise SeedFileError(f"seed file {path} has {len(problems)} problem(s):\n" + "\n".join(problems))
    if not seeds:
        raise SeedFileError(f"seed file {path} holds no seed names")
    return SeedBatch(key=batch_key(path), path=path.resolve(), seeds=tuple(seeds),
                     digest=hashlib.sha256(raw).hexdigest()[:16])


def find_seed_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SEED_SUFFIXES)
