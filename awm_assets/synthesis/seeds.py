"""Seed batches: a file of seed names, JSONL (`{"name", "description"?}`) or one name per line.

A targeted batch (written by `awm evolve` from what an evaluated policy fails at) adds one JSONL line
`{"focus": {...}}`: the weaknesses and their evidence, which scenario generation puts in its prompt, and
`max_new_scenarios`, the batch's cap on accepted scenarios."""

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
    focus: dict | None = None  # a targeted batch's weaknesses (see the module docstring)


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
    focus: dict | None = None
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
            if isinstance(obj, dict) and "focus" in obj and "name" not in obj:
                if focus is not None:
                    problems.append(f"{path.name}:{lineno}: a second 'focus' line (a batch has at most one)")
                elif not isinstance(obj["focus"], dict) or not isinstance(obj["focus"].get("weaknesses"), list):
                    problems.append(f"{path.name}:{lineno}: 'focus' must be an object with a 'weaknesses' list")
                elif not isinstance(cap := obj["focus"].get("max_new_scenarios", 1), int) or isinstance(cap, bool) or cap < 1:
                    problems.append(f"{path.name}:{lineno}: focus 'max_new_scenarios' must be a positive integer, got {cap!r}")
                else:
                    focus = obj["focus"]
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
                     digest=hashlib.sha256(raw).hexdigest()[:16], focus=focus)


def find_seed_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SEED_SUFFIXES)


TARGETED_PREFIX = "evolve_"  # targeted batches are seeds/evolve_<n>.jsonl, n counting this store's earlier ones


def next_targeted_name(generated_batches: list[str]) -> str:
    """The next targeted batch name, after the targeted batches the store has already generated."""
    rounds = [int(k[len(TARGETED_PREFIX):]) for k in generated_batches
              if k.startswith(TARGETED_PREFIX) and k[len(TARGETED_PREFIX):].isdigit()]
    return f"{TARGETED_PREFIX}{max(rounds, default=0) + 1}"


def targeted_batch_lines(weaknesses: list[dict], scenarios: list[dict], *, evaluation: str, max_new_scenarios: int,
                         candidates: int, max_seeds: int = 3) -> list[str]:
    """A targeted seed batch as JSONL lines: the focus (weaknesses with evidence, the cap) and, as seeds, the
    scenarios the policy failed in most (`scenarios`: {"name", "description", "failed"}), so that candidates
    are new (the dedup pool holds the seeds) yet exercise what failed there."""
    if not weaknesses:
        raise ValueError("no weaknesses to aim a seed batch at (the evaluated policy failed nothing)")
    if max_new_scenarios < 1 or candidates < 1:
        raise ValueError(f"max_new_scenarios and candidates must be at least 1, got {max_new_scenarios}, {candidates}")
    focus = {"evaluation": evaluation, "max_new_scenarios": max_new_scenarios, "candidates": candidates,
             "weaknesses": weaknesses}
    ranked = sorted(scenarios, key=lambda s: -int(s.get("failed", 0)))[:max_seeds]
    lines = [json.dumps({"focus": focus}, ensure_ascii=False)]
    lines += [json.dumps({"name": s["name"], **({"description": s["description"]} if s.get("description") else {})},
                         ensure_ascii=False) for s in ranked]
    return lines
