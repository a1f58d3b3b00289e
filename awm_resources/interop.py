"""AWM JSONL interop: import a folder of AWM-format files into the store, export the store back.

Format (see ../shared/awm-corpus/README.md): one JSON object per line in `gen_scenario.jsonl`,
`gen_tasks.jsonl`, `gen_db.jsonl`, `gen_sample.jsonl`, `gen_spec.jsonl`, `gen_envs.jsonl`,
`gen_verifier.jsonl` (sql mode) and `gen_verifier.pure_code.jsonl` (code mode), joined by normalised
scenario name. Partial folders are normal (the released sample has no complete scenario): a stage
without a record is reported missing, never invented. Every bad line is reported with file, line and
scenario and the rest is imported; a scenario's files are only replaced by ones that built cleanly.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from awm_resources.clock import CLOCK_FILE, IMPORT_NOW, sql_now
from awm_resources.documents import SCENARIO_FILE, TASKS_FILE, VERIFIERS_FILE, dump, verifier_functions
from awm_resources.names import normalize_scenario_name
from awm_resources.published_verifiers import published_records
from awm_resources.sqlite_build import (
    SampleTable,
    SchemaTable,
    build_database,
    sample_sql,
    schema_sql,
)
from awm_resources.store import PIPELINE_STAGES, ArtifactStore, stage_status_doc

IMPORT_THRESHOLD = 0.10  # the paper's tolerance for failing tables / inserts
OPERATION_ID = re.compile(r"operation_id\s*=\s*['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ScenarioRecord(_Loose):
    name: str
    description: str | None = None


class TasksRecord(_Loose):
    scenario: str
    tasks: list[str]


class DbRecord(_Loose):
    scenario: str
    db_schema: dict[str, Any]
    db_path: str | None = None


class SampleRecord(_Loose):
    scenario: str
    sample_data: dict[str, Any]


class SpecRecord(_Loose):
    scenario: str
    api_spec: dict[str, Any]


class EnvRecord(_Loose):
    scenario: str
    full_code: str
    db_path: str | None = None


class VerifierRecord(_Loose):
    scenario: str
    task_idx: int
    task: str | None = None
    verification: dict[str, Any]


@dataclass
class ImportIssue:
    file: str
    line: int | None
    scenario: str | None
    problem: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where} [{self.scenario or '?'}]: {self.problem}"


@dataclass
class ScenarioImport:
    key: str
    name: str
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> metadata
    missing: list[str] = field(default_factory=list)
    written: bool = False


@dataclass
class ImportReport:
    source: str
    scenarios: dict[str, ScenarioImport] = field(default_factory=dict)
    issues: list[ImportIssue] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "scenarios": {k: {"name": s.name, "stages": s.stages, "missing": s.missing, "written": s.written}
                          for k, s in self.scenarios.items()},
            "issues": [vars(i) for i in self.issues],
        }


@dataclass
class _Located:
    record: Any
    file: str
    line: int


@dataclass
class _Parts:
    name: str | None = None
    by_file: dict[str, _Located] = field(default_factory=dict)
    verifiers: dict[tuple[str, int], _Located] = field(default_factory=dict)


_FILE_MODELS: dict[str, tuple[type[_Loose], str]] = {
    "gen_scenario": (ScenarioRecord, "name"),
    "gen_tasks": (TasksRecord, "scenario"),
    "gen_db": (DbRecord, "scenario"),
    "gen_sample": (SampleRecord, "scenario"),
    "gen_spec": (SpecRecord, "scenario"),
    "gen_envs": (EnvRecord, "scenario"),
    "gen_verifier": (VerifierRecord, "scenario"),
    "gen_verifier.pure_code": (VerifierRecord, "scenario"),
}


def _short_error(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()[:3])


@dataclass
class _LineRef:
    """Where one record lies in its file: read again (seek) when its scenario is built."""

    stem: str
    offset: int
    length: int
    line: int


@dataclass
class _Index:
    names: dict[str, str] = field(default_factory=dict)  # display name -> "file:line" where first seen
    refs: dict[str, _LineRef] = field(default_factory=dict)  # stem -> record (one per scenario)
    verifiers: dict[tuple[str, int], _LineRef] = field(default_factory=dict)


def _iter_lines(path: Path):
    """(line number, byte offset, raw bytes) of every line, without holding the file in memory."""
    offset = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            yield lineno, offset, raw
            offset += len(raw)


def _parse(raw: bytes, fname: str, lineno: int, model: type[_Loose], key_field: str,
           issues: list[ImportIssue]) -> tuple[str, str, Any] | None:
    """(key, display name, record) of one line, or None with the problem reported (file and line)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        issues.append(ImportIssue(fname, lineno, None, f"not UTF-8 text (byte {exc.start} of the line: "
                                                       f"{raw[exc.start:exc.start + 1]!r}); line skipped"))
        return None
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        issues.append(ImportIssue(fname, lineno, None, f"malformed JSON ({exc.msg} at column {exc.colno})"))
        return None
    name = obj.get(key_field) if isinstance(obj, dict) else None
    if not isinstance(name, str) or not name.strip():
        issues.append(ImportIssue(fname, lineno, None, f"record has no string {key_field!r} field"))
        return None
    try:
        key = normalize_scenario_name(name)
        rec = model.model_validate(obj)
    except (ValidationError, ValueError) as exc:
        msg = _short_error(exc) if isinstance(exc, ValidationError) else str(exc)
        issues.append(ImportIssue(fname, lineno, name, f"invalid record: {msg}"))
        return None
    return key, name.strip(), rec


def index_awm_dir(src: Path, issues: list[ImportIssue]) -> dict[str, _Index]:
    """First pass: every record's scenario and place, each line parsed and dropped (memory stays bounded
    by the largest record, not the dataset). Bad lines (bytes, JSON, fields) are reported, not fatal."""
    index: dict[str, _Index] = defaultdict(_Index)
    found = False
    for stem, (model, key_field) in _FILE_MODELS.items():
        path = src / f"{stem}.jsonl"
        if not path.is_file():
            continue
        found = True
        fname = path.name
        for lineno, offset, raw in _iter_lines(path):
            parsed = _parse(raw, fname, lineno, model, key_field, issues)
            if parsed is None:
                continue
            key, name, rec = parsed
            entry = index[key]
            entry.names.setdefault(name, f"{fname}:{lineno}")
            ref = _LineRef(stem, offset, len(raw), lineno)
            if isinstance(rec, VerifierRecord):
                if rec.verification.get("code") in (None, ""):
                    issues.append(ImportIssue(fname, lineno, key, f"task {rec.task_idx}: verifier code is null (generation failed); skipped"))
                    continue
                vkey = (stem, rec.task_idx)
                if vkey in entry.verifiers:
                    issues.append(ImportIssue(fname, lineno, key, f"duplicate verifier for task {rec.task_idx} "
                                                                  f"(first at line {entry.verifiers[vkey].line}); kept the first"))
                    continue
                entry.verifiers[vkey] = ref
            elif stem in entry.refs:
                issues.append(ImportIssue(fname, lineno, key, f"duplicate record for this scenario (first at line "
                                                              f"{entry.refs[stem].line}); kept the first"))
            else:
                entry.refs[stem] = ref
    if not found:
        raise FileNotFoundError(f"{src} holds no AWM files (expected gen_scenario.jsonl, gen_tasks.jsonl, ...)")
    return index


def name_collisions(index: dict[str, _Index]) -> dict[str, list[str]]:
    """Keys that two different display names normalise to: importing them would mix two scenarios' files.
    (A record naming its scenario by the normalised key itself, as verifier files do, is not a collision.)"""
    return {key: [f"{n!r} ({where})" for n, where in entry.names.items()]
            for key, entry in index.items() if len([n for n in entry.names if n != key]) > 1}


def _load_parts(src: Path, key: str, entry: _Index) -> _Parts:
    """Second pass for one scenario: its records read back by offset and validated."""
    parts = _Parts(name=_display_name(entry, key))
    handles: dict[str, Any] = {}
    try:
        def read(ref: _LineRef) -> _Located:
            fh = handles.get(ref.stem) or handles.setdefault(ref.stem, (src / f"{ref.stem}.jsonl").open("rb"))
            fh.seek(ref.offset)
            model = _FILE_MODELS[ref.stem][0]
            return _Located(model.model_validate(json.loads(fh.read(ref.length).decode("utf-8"))),
                            f"{ref.stem}.jsonl", ref.line)

        for stem, ref in entry.refs.items():
            parts.by_file[stem] = read(ref)
        for vkey, ref in entry.verifiers.items():
            parts.verifiers[vkey] = read(ref)
    finally:
        for fh in handles.values():
            fh.close()
    return parts


def _count_tools(code: str) -> int:
    return len(set(OPERATION_ID.findall(code)))


def _spec_operations(api_spec: dict[str, Any]) -> list[str | None]:
    return [ep.get("operation_id") for g in api_spec.get("api_groups", []) for ep in g.get("endpoints", [])
            if isinstance(ep, dict) and ep.get("operation_id")]


def _verifier_entry(loc: _Located, file_stem: str) -> dict[str, Any]:
    rec: VerifierRecord = loc.record
    code = rec.verification["code"]
    entry: dict[str, Any] = {
        "task_idx": rec.task_idx,
        "task": rec.task,
        "file": file_stem,
        "functions": verifier_functions(code),
        "code": code,
        "verification": rec.verification,
    }
    raw = rec.verification.get("raw_response")
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
            for k in ("reasoning", "success_criteria", "failure_criteria"):
                if isinstance(parsed.get(k), str):
                    entry[k] = parsed[k]
        except (json.JSONDecodeError, AttributeError):
            pass
    return entry


def _artifact_json(obj: Any) -> str:
    """An imported artifact as compact JSON: the C encoder (with `indent` json falls back to its pure-Python
    encoder, a tenth or more of an AWM-1K import's build time for verifiers, samples and specs)."""
    return json.dumps(obj, ensure_ascii=False)


def _stage_files(parts: _Parts, key: str, staging: Path, issues: list[ImportIssue]) -> tuple[dict, dict]:
    """Write a scenario's artifacts into `staging`; return (stage -> metadata, stage -> written files)."""
    meta: dict[str, dict[str, Any]] = {}
    files: dict[str, list[str]] = {}

    def put(stage: str, name: str, data: str | bytes) -> None:
        (staging / name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        files.setdefault(stage, []).append(name)

    b = parts.by_file
    sc = b.get("gen_scenario")
    scenario_doc = {
        "name": parts.name or key,
        "key": key,
        "description": sc.record.description if sc else None,
        "source": "imported",
    }
    if sc is None:
        issues.append(ImportIssue("gen_scenario.jsonl", None, key, "scenario has no gen_scenario record (no description)"))
    put("scenario", SCENARIO_FILE, _artifact_json(scenario_doc))
    meta["scenario"] = {"has_description": sc is not None}

    if "gen_tasks" in b:
        tasks = b["gen_tasks"].record.tasks
        put("tasks", TASKS_FILE, _artifact_json({"tasks": tasks}))
        meta["tasks"] = {"tasks": len(tasks), "valid": bool(tasks) and len(set(tasks)) == len(tasks)}

    tables: list[SchemaTable] | None = None
    if "gen_db" in b:
        loc = b["gen_db"]
        try:
            tables = [SchemaTable.model_validate(t) for t in loc.record.db_schema.get("tables", [])]
        except ValidationError as exc:
            issues.append(ImportIssue(loc.file, loc.line, key, f"db_schema: {_short_error(exc)}"))
        if tables is not None:
            raw_tables = loc.record.db_schema.get("tables", [])
            put("db_schema", "schema.json", _artifact_json({"tables": raw_tables, "db_path": loc.record.db_path}))
            put("db_schema", "schema.sql", schema_sql(tables))

    samples: list[SampleTable] | None = None
    if "gen_sample" in b and tables is not None:
        loc = b["gen_sample"]
        try:
            samples = [SampleTable.model_validate(t) for t in loc.record.sample_data.get("tables", [])]
        except ValidationError as exc:
            issues.append(ImportIssue(loc.file, loc.line, key, f"sample_data: {_short_error(exc)}"))
    elif "gen_sample" in b:
        loc = b["gen_sample"]
        issues.append(ImportIssue(loc.file, loc.line, key, "sample data without a usable schema; skipped"))

    if tables is not None:
        db_tmp = staging / "initial.db"
        result = build_database(db_tmp, tables, samples, now=IMPORT_NOW)  # the same rows on every import
        put("db_schema", CLOCK_FILE, json.dumps({"now": sql_now(IMPORT_NOW), "source": "imported"}) + "\n")
        for f in result.failures:
            src = b["gen_db"] if f.kind in ("ddl", "index") else b["gen_sample"]
            issues.append(ImportIssue(src.file, src.line, key, f"{f.kind} #{f.index} for table {f.table} failed: {f.error} -- {f.statement}"))
        meta["db_schema"] = {"tables": result.tables_total, "tables_failed": result.tables_failed,
                             "indexes_failed": result.indexes_failed,
                             "error_rate": round(result.table_error_rate, 4),
                             "valid": result.table_error_rate <= IMPORT_THRESHOLD}
        if samples is not None:
            loc = b["gen_sample"]
            put("sample_data", "sample.json", _artifact_json({"tables": loc.record.sample_data.get("tables", []),
                                                              "tables_count": getattr(loc.record, "tables_count", None),
                                                              "inserts_count": getattr(loc.record, "inserts_count", None)}))
            put("sample_data", "sample.sql", sample_sql(samples))
            files["sample_data"].append("initial.db")
            meta["sample_data"] = {"inserts": result.inserts_total, "inserts_failed": result.inserts_failed,
                                   "sample_rows": result.rows, "error_rate": round(result.insert_error_rate, 4),
                                   "valid": result.insert_error_rate <= IMPORT_THRESHOLD,
                                   "failed_statements": [f.model_dump() for f in result.failures if f.kind == "insert"][:20]}
        else:
            db_tmp.unlink(missing_ok=True)

    if "gen_spec" in b:
        spec = b["gen_spec"].record.api_spec
        put("api_spec", "api_spec.json", _artifact_json(spec))
        ops = _spec_operations(spec)
        meta["api_spec"] = {"endpoints": len(ops), "groups": len(spec.get("api_groups", [])),
                            "valid": bool(ops) and len(set(ops)) == len(ops)}

    if "gen_envs" in b:
        code = b["gen_envs"].record.full_code
        put("env_code", "server.py", code)
        meta["env_code"] = {"tools": _count_tools(code), "lines_of_code": len(code.splitlines()),
                            "valid": _count_tools(code) > 0,
                            "db_path": b["gen_envs"].record.db_path}

    if parts.verifiers:
        entries = [_verifier_entry(loc, stem) for (stem, _), loc in sorted(parts.verifiers.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
        put("verifiers", VERIFIERS_FILE, _artifact_json({"verifiers": entries}))
        covered = {e["task_idx"] for e in entries if e["functions"]}
        n_tasks = len(b["gen_tasks"].record.tasks) if "gen_tasks" in b else 0
        meta["verifiers"] = {"verifiers": len(covered), "entries": len(entries), "valid": bool(covered) and len(covered) >= n_tasks,
                             "modes": sorted({"sql" if "verify_task" in e["functions"] else "code" for e in entries})}
    return meta, files


def _write_status(folder: Path, stage: str, status: dict[str, Any]) -> None:
    """The store's status file, written plainly into the staging folder (flushed with the whole scenario)."""
    (folder / "status").mkdir(exist_ok=True)
    (folder / "status" / f"{stage}.json").write_text(
        json.dumps(stage_status_doc(stage, status), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _build_scenario(src: str, key: str, entry: _Index, staging_root: str) -> tuple[str, dict, dict, list, str | None]:
    """Build one scenario complete in a staging folder (a worker process runs this). Returns the key, stage
    metadata, stage files, issues and the staging folder (None when it failed: nothing is replaced)."""
    issues: list[ImportIssue] = []
    staging = Path(tempfile.mkdtemp(prefix=f".import-{key}-", dir=staging_root))
    try:
        parts = _load_parts(Path(src), key, entry)
        meta, files = _stage_files(parts, key, staging, issues)
        for stage in files:
            _write_status(staging, stage, {"source": "imported", "source_dir": src, **meta.get(stage, {})})
        return key, meta, files, issues, str(staging)
    except Exception as exc:  # noqa: BLE001 - one scenario's failure must not stop the others
        shutil.rmtree(staging, ignore_errors=True)
        issues.append(ImportIssue(src, None, key, f"import failed, store left unchanged: {type(exc).__name__}: {exc}"))
        return key, {}, {}, issues, None


def _existing_source(store: ArtifactStore, key: str) -> str | None:
    """Where the stored scenario came from: its import folder, 'synthesis', or None when there is none."""
    if not store.has(key, SCENARIO_FILE):
        return None
    try:
        if store.scenario(key).source != "imported":
            return "synthesis"
        status = store.status(key, "scenario")
    except (OSError, ValueError):
        return "an unreadable scenario"
    return (status.metric("source_dir", None) if status else None) or "an unknown folder"


def _swap_in(store: ArtifactStore, key: str, staging: Path) -> None:
    """Replace the scenario folder whole: the new one is renamed into place, the old one removed after."""
    target = store.scenario_dir(key)
    old = None
    if target.exists():
        old = target.with_name(f".replaced-{key}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def import_awm_dir(src: Path | str, store: ArtifactStore, progress: Callable[[str, int], None] | None = None, *,
                   replace: bool = False, workers: int | None = None, sync_every: int = 64,
                   on_committed: Callable[[list[str], ImportReport], None] | None = None) -> ImportReport:
    """Import every scenario found in `src` into `store`; see the module docstring for the rules.

    Streaming: a first pass indexes the files (each line parsed and dropped), then scenarios are built in
    `workers` processes, each complete in a staging folder, and swapped in whole, so a re-import replaces
    every stage of a scenario or none. A scenario imported from another folder is replaced only with
    `replace=True`. Staged files are flushed with one sync per `sync_every` scenarios, not one per file.
    `progress(key, total)` is called after each scenario (a CLI progress bar), `on_committed(keys, report)`
    after each chunk of scenarios is in place (Dagster events are written from there)."""
    src = Path(src)
    report = ImportReport(source=str(src.resolve()))
    index = index_awm_dir(src, report.issues)
    for key, names in sorted(name_collisions(index).items()):
        report.issues.append(ImportIssue(str(src), None, key, "names " + " and ".join(names) + f" normalise to the same "
                                         f"key {key!r}: neither is imported (rename one in the source)"))
        del index[key]
    for key in sorted(index):
        previous = _existing_source(store, key)
        if previous and (previous == "synthesis" or Path(previous).resolve() != src.resolve()) and not replace:
            report.issues.append(ImportIssue(str(src), None, key, f"already imported from {previous}; not replaced "
                                             "(import with replace to take this source instead)"))
            del index[key]
    store.scenarios_root.mkdir(parents=True, exist_ok=True)
    total = len(index)
    built: list[tuple[str, Path]] = []

    def finish(result: tuple[str, dict, dict, list, str | None]) -> None:
        key, meta, files, issues, staging = result
        report.issues.extend(issues)
        if staging is not None:
            built.append((key, Path(staging)))
            imp = ScenarioImport(key=key, name=_display_name(index[key], key), stages=meta, written=True)
            imp.missing = [s for s in PIPELINE_STAGES if s not in files]
            report.scenarios[key] = imp
        if len(built) >= sync_every:
            _commit(store, built, report, on_committed)
        if progress is not None:
            progress(key, total)

    jobs = [(str(src.resolve()), key, index[key], str(store.scenarios_root)) for key in sorted(index)]
    n_workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(jobs)))
    try:
        done: set[str] = set()
        if n_workers > 1 and len(jobs) >= 8:
            try:
                with ProcessPoolExecutor(max_workers=n_workers, mp_context=mp.get_context("spawn")) as pool:
                    futures = [pool.submit(_build_scenario, *job) for job in jobs]
                    for future in as_completed(futures):
                        result = future.result()
                        done.add(result[0])
                        finish(result)
            except BrokenProcessPool as exc:  # a worker died (memory, a signal): build the rest here
                report.issues.append(ImportIssue(str(src), None, None, f"a build worker died ({exc}); the remaining "
                                                 "scenarios were built in the importing process"))
        for job in jobs:
            if job[1] not in done:
                finish(_build_scenario(*job))
        _commit(store, built, report, on_committed)
    finally:
        for _, staging in built:  # staged but not swapped in (an error above): leave nothing behind
            shutil.rmtree(staging, ignore_errors=True)
    return report


def _display_name(entry: _Index, key: str) -> str:
    return next((n for n in entry.names if n != key), None) or next(iter(entry.names), key)


def _commit(store: ArtifactStore, built: list[tuple[str, Path]], report: ImportReport,
            on_committed: Callable[[list[str], ImportReport], None] | None) -> None:
    """Flush the staged scenarios to disk once, then swap each in (a crash leaves old or new, never half)."""
    if not built:
        return
    os.sync()
    for key, staging in built:
        _swap_in(store, key, staging)
    keys = [key for key, _ in built]
    built.clear()
    if on_committed is not None:
        on_committed(keys, report)


def export_awm_dir(store: ArtifactStore, dest: Path | str, scenarios: list[str] | None = None) -> dict[str, int]:
    """Write the store's scenarios back as AWM JSONL files in `dest`, as the published pipeline writes them (its
    verifier files and record shapes: `published_verifiers`); returns lines written per file."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {stem: [] for stem in _FILE_MODELS}

    def emit(stem: str, obj: dict[str, Any]) -> None:
        lines[stem].append(json.dumps(obj, ensure_ascii=False))

    for key in scenarios or store.list_scenarios():
        sc = store.scenario(key)
        name = sc.name or key
        if sc.description is not None:
            emit("gen_scenario", {"name": name, "description": sc.description})
        if store.has(key, TASKS_FILE):
            emit("gen_tasks", {"scenario": name, "tasks": store.tasks(key).tasks})
        if store.has(key, "schema.json"):
            schema = store.read_json(key, "schema.json")
            emit("gen_db", {"scenario": name, "db_schema": {"tables": schema["tables"]},
                            "db_path": schema.get("db_path") or f"./outputs/databases/{key}.db"})
        if store.has(key, "sample.json"):
            sample = store.read_json(key, "sample.json")
            tables = sample["tables"]
            emit("gen_sample", {"scenario": name,
                                "tables_count": sample.get("tables_count") or len(tables),
                                "inserts_count": sample.get("inserts_count") or sum(len(t.get("insert_statements", [])) for t in tables),
                                "sample_data": {"tables": tables}})
        if store.has(key, "api_spec.json"):
            emit("gen_spec", {"scenario": name, "api_spec": store.read_json(key, "api_spec.json")})
        if store.has(key, "server.py"):
            status = store.status(key, "env_code")
            db_path = status.metric("db_path", None) if status else None
            emit("gen_envs", {"scenario": name, "db_path": db_path or f"./outputs/databases/{key}.db",
                              "full_code": store.read_text(key, "server.py")})
        if store.has(key, VERIFIERS_FILE):
            for v in store.verifiers(key).verifiers:
                for stem, verification in published_records(dump(v)):
                    emit(stem, {"scenario": key, "task_idx": v.task_idx, "task": v.task, "verification": verification})
    written = {}
    for stem, rows in lines.items():
        if rows:
            (dest / f"{stem}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
            written[f"{stem}.jsonl"] = len(rows)
    return written

