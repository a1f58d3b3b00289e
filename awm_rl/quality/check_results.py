"""Env-check results kept for the quality gate, so that it does not run generated code a second time for what
the synthesis stages already ran.

A scenario's synthesis runs the env-check worker with the tool probe (env_code stage) and with the reference
solutions (verifiers stage); the quality gate then needs the same probe and the same solution runs on the same
code and database. Each result is kept in the scenario's `check_results/` folder under a key of everything it
depends on: the check's own code (the sources of `awm_rl.runtime`, `awm_rl.quality` and `awm_rl.isolation.limits`), the
server code, the initial database's bytes and, for a solution, the solution itself. Only completed checks are
kept (a probe that ran, solution runs with their final databases). The gate takes what matches, runs only what is
missing, and then clears the folder: a hit is the same result a new run would give, and anything left from a
rejected attempt goes with it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from awm_resources.store import ArtifactStore, atomic_write_json

CHECK_RESULTS_DIR = "check_results"  # in the scenario folder; not an environment file (provenance.ENVIRONMENT_FILES)


@functools.cache
def check_code_digest() -> str:
    """What the env-check worker runs besides the generated code: a change to it makes every kept result stale."""
    root = Path(__file__).resolve().parents[1]  # awm_rl/
    digest = hashlib.sha256()
    for path in sorted([*root.joinpath("runtime").glob("*.py"), *root.joinpath("quality").glob("*.py"),
                        *root.joinpath("isolation").glob("*.py")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class CheckResults:
    """The kept results of one scenario's code on one initial database."""

    def __init__(self, store: ArtifactStore, scenario: str, code: str, initial_db: Path):
        self.folder = store.scenario_dir(scenario) / CHECK_RESULTS_DIR
        try:
            db = _file_digest(initial_db)
        except FileNotFoundError:  # the check reports it; nothing to keep
            db = f"missing {os.urandom(8).hex()}"
        self._base = hashlib.sha256("\0".join([check_code_digest(), hashlib.sha256(code.encode()).hexdigest(),
                                               db]).encode()).hexdigest()

    def _key(self, kind: str, part: Any = None) -> str:
        text = json.dumps([self._base, kind, part], sort_keys=True, ensure_ascii=False, default=str)
        return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"

    def _solution_key(self, solution: dict[str, Any]) -> str | None:
        """By what a run depends on (its calls and final answer), however the solution was written down; None for
        a malformed one (never kept: the worker reports it)."""
        from pydantic import ValidationError

        from awm_rl.quality.solutions import ReferenceSolution

        try:
            parsed = ReferenceSolution.model_validate(solution)
        except ValidationError:
            return None
        return self._key("solution", parsed.model_dump(include={"calls", "final_answer"}))

    # --- the tool probe -------------------------------------------------------------------------------------
    def keep_probe(self, probe: dict[str, dict] | None) -> None:
        """A whole probe only: one cut short by its time budget depends on the machine's load."""
        if probe is not None and not any("probe budget" in (t.get("note") or "") for t in probe.values()):
            atomic_write_json(self.folder / f"{self._key('probe')}.json", probe)

    def probe(self) -> dict[str, dict] | None:
        return _read_json(self.folder / f"{self._key('probe')}.json")

    # --- reference solution runs ------------------------------------------------------------------------------
    def keep_solution_runs(self, solutions: dict[int, dict], runs: dict[str, dict]) -> None:
        """Each run (calls, final answer) with a copy of its final database, and once the instance's initial
        database (the file after the code's own import-time changes, which every run starts from)."""
        for idx, run in runs.items():
            solution = solutions.get(int(idx))
            key = self._solution_key(solution) if solution is not None else None
            if key is None or not (Path(run["final_db"]).is_file() and Path(run["initial_db"]).is_file()):
                continue
            start = self.folder / f"{self._key('initial')}.db"
            if not start.is_file():
                self._copy(Path(run["initial_db"]), start)
            self._copy(Path(run["final_db"]), self.folder / f"{key}.db")
            atomic_write_json(self.folder / f"{key}.json", {k: v for k, v in run.items() if k not in
                                                             ("initial_db", "final_db")})

    def solution_runs(self, solutions: dict[int, dict]) -> dict[str, dict]:
        """task_idx (str) -> the kept run of exactly that solution, with its kept databases."""
        start = self.folder / f"{self._key('initial')}.db"
        if not start.is_file():
            return {}
        found = {}
        for idx, solution in solutions.items():
            key = self._solution_key(solution)
            if key is None:
                continue
            run, final = _read_json(self.folder / f"{key}.json"), self.folder / f"{key}.db"
            if run is not None and final.is_file():
                found[str(idx)] = {**run, "initial_db": str(start), "final_db": str(final)}
        return found

    def _copy(self, source: Path, dest: Path) -> None:
        """Whole or not at all: a reader never sees a partly copied database."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".part")
        os.close(fd)
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
