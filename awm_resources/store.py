"""The artifact store: one folder per scenario under `$AWM_HOME/scenarios/`, every write atomic.

Stages write their artifacts here (never through an IO manager) so that the Dagster UI, the CLI, the
runtime and the trainer all read the same files. A write goes to a temp file in the same folder and is
renamed into place, so a crash mid-write never leaves a half-written artifact, and a failed stage never
touches what an earlier successful one stored. A temp file names its writer (host and pid); the next write of
the same file removes those whose writer died mid-write (SIGKILL skips every cleanup).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil

from awm_resources.documents import (
    CATALOG_FILE,
    DIFFICULTY_DIR,
    QUALITY_FILE,
    SCENARIO_FILE,
    TASKS_FILE,
    VERIFIERS_FILE,
    AttemptRecord,
    Catalog,
    DifficultyPart,
    DocumentT,
    QualityResult,
    Scenario,
    StageStatus,
    TaskList,
    VerifiersFile,
    dump,
    parse,
    read,
)
from awm_resources.names import normalize_scenario_name
from awm_resources.settings import PROJECT_ROOT, load_settings

# Stage name -> the artifact files it owns (relative to the scenario folder).
STAGE_FILES: dict[str, tuple[str, ...]] = {
    "scenario": (SCENARIO_FILE,),
    "tasks": (TASKS_FILE,),
    "db_schema": ("schema.sql", "schema.json"),
    "sample_data": ("sample.sql", "sample.json", "initial.db"),
    "api_spec": ("api_spec.json",),
    "env_code": ("server.py",),
    "verifiers": (VERIFIERS_FILE,),
}
STAGES: tuple[str, ...] = tuple(STAGE_FILES)
PIPELINE_STAGES: tuple[str, ...] = STAGES[1:]  # the per-scenario stages after the scenario itself


def default_home() -> Path:
    """`$AWM_HOME`, or `.awm_home/` inside the project (ignored by git)."""
    return Path(load_settings().paths.home or PROJECT_ROOT / ".awm_home").resolve()


HOST = socket.gethostname()
_RECORD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def process_alive(pid: int, since: float) -> bool:
    """Process `pid` of this host runs (not a zombie) and existed at `since` (is not a later one reusing the pid)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= since + 1
    except psutil.Error:
        return False


def _temp_file(path: Path) -> tuple[int, str]:
    """A temp file beside `path` named after its writer, once the temp files of dead writers of `path` are gone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f".{path.name}.{HOST}-"
    for name in os.listdir(path.parent):
        pid = name[len(head):].split(".", 1)[0] if name.startswith(head) and ".tmp" in name else ""
        if pid.isdigit():
            stale = path.parent / name
            try:
                if not process_alive(int(pid), stale.stat().st_mtime):
                    stale.unlink()
            except FileNotFoundError:
                pass
    return tempfile.mkstemp(prefix=f"{head}{os.getpid()}.", suffix=".tmp", dir=path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temp file in the same folder + fsync + rename."""
    fd, tmp = _temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path to build a file in (e.g. a SQLite database); renamed onto `path` on success."""
    fd, tmp = _temp_file(path)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.unlink()
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def stage_status_doc(stage: str, status: dict[str, Any], where: Path | str | None = None) -> dict[str, Any]:
    """What `status/<stage>.json` (`where`) holds, written by the store or into an import's staging folder; a
    status that does not fit `StageStatus` is an error here, not in its readers."""
    doc = {**status, "stage": stage, "written_at": time.time()}
    return dump(parse(StageStatus, doc, where or f"status/{stage}.json"))


class ArtifactStore:
    """Files of every scenario, plus per-stage status and attempt records."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root).resolve() if root else default_home()
        self.scenarios_root = self.root / "scenarios"

    # -- layout -------------------------------------------------------------------------------
    def scenario_dir(self, key: str) -> Path:
        if key != normalize_scenario_name(key):
            raise ValueError(f"{key!r} is not a normalised scenario key")
        return self.scenarios_root / key

    def path(self, key: str, filename: str) -> Path:
        return self.scenario_dir(key) / filename

    def list_scenarios(self) -> list[str]:
        if not self.scenarios_root.is_dir():
            return []
        # Dot folders are an import's staging and replaced copies, never scenarios.
        return sorted(p.name for p in self.scenarios_root.iterdir()
                      if not p.name.startswith(".") and (p / SCENARIO_FILE).is_file())

    def has(self, key: str, filename: str) -> bool:
        return self.path(key, filename).is_file()

    # -- reads --------------------------------------------------------------------------------
    def read_json(self, key: str, filename: str) -> Any:
        path = self.path(key, filename)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"scenario {key!r} has no {filename} (looked at {path})") from None

    def read_text(self, key: str, filename: str) -> str:
        path = self.path(key, filename)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"scenario {key!r} has no {filename} (looked at {path})") from None

    # -- typed documents (awm_resources.documents) ---------------------------------------------
    def document(self, key: str, filename: str, model: type[DocumentT]) -> DocumentT:
        """A scenario's file as `model` (FileNotFoundError naming the scenario; DocumentError naming the field)."""
        path = self.path(key, filename)
        try:
            return read(model, path)
        except FileNotFoundError:
            raise FileNotFoundError(f"scenario {key!r} has no {filename} (looked at {path})") from None

    def scenario(self, key: str) -> Scenario:
        return self.document(key, SCENARIO_FILE, Scenario)

    def tasks(self, key: str) -> TaskList:
        return self.document(key, TASKS_FILE, TaskList)

    def verifiers(self, key: str) -> VerifiersFile:
        return self.document(key, VERIFIERS_FILE, VerifiersFile)

    def status(self, key: str, stage: str) -> StageStatus | None:
        """`stage_status`, typed."""
        path = self.path(key, f"status/{stage}.json")
        return read(StageStatus, path) if path.is_file() else None

    def attempts(self, key: str, stage: str) -> list[AttemptRecord]:
        """`list_attempts`, typed."""
        folder = self.attempts_dir(key, stage)
        files = sorted(folder.glob("*.json"), key=lambda p: int(p.stem)) if folder.is_dir() else []
        return [read(AttemptRecord, p) for p in files]

    def quality(self, key: str) -> QualityResult | None:
        """The quality gate's last result for the scenario (current or not: see awm_rl.quality.results)."""
        path = self.path(key, QUALITY_FILE)
        return read(QualityResult, path) if path.is_file() else None

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_FILE

    def catalog(self) -> Catalog | None:
        """The catalog the environment_catalog asset last wrote, or None before the first refresh."""
        return read(Catalog, self.catalog_path) if self.catalog_path.is_file() else None

    def write_catalog(self, catalog: Catalog) -> Path:
        atomic_write_json(self.catalog_path, dump(catalog))
        return self.catalog_path

    # -- writes -------------------------------------------------------------------------------
    def write_json(self, key: str, filename: str, obj: Any) -> Path:
        path = self.path(key, filename)
        atomic_write_json(path, obj)
        return path

    def write_text(self, key: str, filename: str, text: str) -> Path:
        path = self.path(key, filename)
        atomic_write_text(path, text)
        return path

    # -- stage status -------------------------------------------------------------------------
    def stage_status(self, key: str, stage: str) -> dict[str, Any] | None:
        """What the last successful materialization of `stage` recorded (metadata), or None."""
        path = self.path(key, f"status/{stage}.json")
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def write_stage_status(self, key: str, stage: str, status: dict[str, Any]) -> None:
        path = self.path(key, f"status/{stage}.json")
        atomic_write_json(path, stage_status_doc(stage, status, path))

    def present_stages(self, key: str) -> list[str]:
        """Stages whose every artifact file exists (one directory listing: the catalog asks this of every
        scenario of an AWM-1K store)."""
        folder = self.scenario_dir(key)
        try:
            names = set(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [s for s in STAGES if all(f in names and os.path.isfile(os.path.join(folder, f)) for f in STAGE_FILES[s])]

    # -- attempts -----------------------------------------------------------------------------
    def attempts_dir(self, key: str, stage: str) -> Path:
        return self.scenario_dir(key) / "attempts" / stage

    def record_attempt(self, key: str, stage: str, number: int, record: dict[str, Any]) -> Path:
        path = self.attempts_dir(key, stage) / f"{number}.json"
        doc = parse(AttemptRecord, {**record, "attempt": number, "stage": stage, "recorded_at": time.time()}, path)
        atomic_write_json(path, dump(doc))
        return path

    def list_attempts(self, key: str, stage: str) -> list[dict[str, Any]]:
        folder = self.attempts_dir(key, stage)
        if not folder.is_dir():
            return []
        files = sorted(folder.glob("*.json"), key=lambda p: int(p.stem))
        return [json.loads(p.read_text(encoding="utf-8")) for p in files]

    def clear_attempts(self, key: str, stage: str) -> None:
        shutil.rmtree(self.attempts_dir(key, stage), ignore_errors=True)

    # -- per-task difficulty records (awm_resources.difficulty) ---------------------------------
    @property
    def difficulty_dir(self) -> Path:
        return self.root / DIFFICULTY_DIR

    def write_difficulty(self, part: DifficultyPart, name: str) -> Path:
        """One part of a run's records, `difficulty/<run>/<name>.json`, written once and atomically: a run's
        writers (trainer processes, steps, refills) each write their own parts, so none overwrites another's."""
        for label, value in (("run", part.run), ("part name", name)):
            if not _RECORD_NAME.fullmatch(value):
                raise ValueError(f"difficulty record {label} {value!r} must be letters, digits, '.', '_' or '-'")
        path = self.difficulty_dir / part.run / f"{name}.json"
        if path.exists():
            raise FileExistsError(f"difficulty record {path} exists already: a part is written once")
        atomic_write_json(path, dump(part))
        return path

    def difficulty_files(self) -> list[Path]:
        """Every difficulty part of every run (awm_resources.difficulty merges them)."""
        return sorted(self.difficulty_dir.glob("*/*.json")) if self.difficulty_dir.is_dir() else []
