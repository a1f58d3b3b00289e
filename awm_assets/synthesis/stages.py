"""The six per-scenario stages: what each asks the LLM, how its answer is executed, what is stored.

Each class implements `runner.StageSpec`: `attempt()` generates + parses + executes and returns an error
rate; `commit()` writes the accepted artifact to the store atomically and returns metadata.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from awm_assets.synthesis import prompts
from awm_assets.synthesis.config import SynthesisConfig
from awm_assets.synthesis.context import store_tool_specs, task_rows, tool_specs
from awm_assets.synthesis.models import ApiSpec, SampleOutput, SchemaOutput, TaskList, VerifierOutput
from awm_assets.synthesis.runner import AttemptContext, AttemptResult
from awm_resources.clock import environment_now
from awm_resources.documents import verifier_functions
from awm_resources.llm import extract_code, parse_model
from awm_resources.sqlite_build import (
    BuildResult,
    SampleTable,
    SchemaTable,
    build_database,
    database_excerpt,
    sample_sql,
    schema_sql,
)
from awm_resources.store import atomic_path

FORBIDDEN_TASK_WORDS = re.compile(r"\b(log ?in|sign ?in|sign ?up|register|password|2fa|two-factor)\b", re.I)


def scenario_info(ctx: AttemptContext) -> tuple[str, str]:
    sc = ctx.store.scenario(ctx.scenario)
    return sc.name or ctx.scenario, sc.description or ""


def load_tasks(ctx: AttemptContext) -> list[str]:
    return ctx.store.tasks(ctx.scenario).tasks


def load_schema(ctx: AttemptContext) -> list[SchemaTable]:
    return [SchemaTable.model_validate(t) for t in ctx.store.read_json(ctx.scenario, "schema.json")["tables"]]


def _single_call(ctx: AttemptContext, stage: str, messages: list[dict]) -> tuple[str, dict, dict]:
    response = ctx.llm.chat(messages, tag=ctx.tag(stage))
    return response.text, {"_": messages}, {"_": response.text}


class TasksStage:
    name, threshold = "tasks", 0.0

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, desc = scenario_info(ctx)
        n = ctx.settings.tasks_per_scenario
        styles = ctx.store.scenario(ctx.scenario).task_styles  # a targeted scenario's (awm evolve)
        text, sent, raw = _single_call(ctx, self.name, prompts.tasks(name, desc, n, ctx.corrections(), styles))
        out = parse_model(text, TaskList)
        errors = [] if len(out.tasks) == n else [f"expected exactly {n} tasks, got {len(out.tasks)}"]
        errors += [f"task {i} asks for authentication, which the environment does not model: {t!r}"
                   for i, t in enumerate(out.tasks) if FORBIDDEN_TASK_WORDS.search(t)]
        return AttemptResult(artifact={"tasks": out.tasks}, error_rate=1.0 if errors else 0.0,
                             errors={"_": errors} if errors else {}, metrics={"tasks": len(out.tasks)},
                             prompts=sent, responses=raw, excerpts={"_": text})

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        ctx.store.write_json(ctx.scenario, "tasks.json", artifact)
        return {"tasks": len(artifact["tasks"])}


def _trial_build(tables: list[SchemaTable], samples: list[SampleTable] | None) -> tuple[BuildResult, list[str]]:
    """Execute schema (and sample data) in a throw-away SQLite file; the failures become error lines."""
    with tempfile.TemporaryDirectory() as tmp:
        result = build_database(Path(tmp) / "trial.db", tables, samples)
    return result, [f"{f.kind} #{f.index} of table {f.table}: {f.error} -- {f.statement}" for f in result.failures]


class SchemaStage:
    name = "db_schema"

    def __init__(self, threshold: float = 0.10):
        self.threshold = threshold

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, desc = scenario_info(ctx)
        text, sent, raw = _single_call(ctx, self.name, prompts.db_schema(name, desc, load_tasks(ctx), ctx.corrections()))
        out = parse_model(text, SchemaOutput)
        result, errors = _trial_build(out.tables, None)
        return AttemptResult(artifact={"tables": [t.model_dump() for t in out.tables]}, error_rate=result.table_error_rate,
                             errors={"_": errors} if errors else {},
                             metrics={"tables": result.tables_total, "tables_failed": result.tables_failed,
                                      "indexes_failed": result.indexes_failed},
                             prompts=sent, responses=raw, excerpts={"_": schema_sql(out.tables)})

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        tables = [SchemaTable.model_validate(t) for t in artifact["tables"]]
        ctx.store.write_json(ctx.scenario, "schema.json", artifact)
        ctx.store.write_text(ctx.scenario, "schema.sql", schema_sql(tables))
        return {"tables": len(tables)}


class SampleDataStage:
    name = "sample_data"

    def __init__(self, threshold: float = 0.10):
        self.threshold = threshold

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, desc = scenario_info(ctx)
        tables = load_schema(ctx)
        text, sent, raw = _single_call(ctx, self.name, prompts.sample_data(
            name, desc, load_tasks(ctx), schema_sql(tables), ctx.corrections()))
        out = parse_model(text, SampleOutput)
        result, errors = _trial_build(tables, out.tables)
        return AttemptResult(artifact={"tables": [t.model_dump() for t in out.tables]}, error_rate=result.insert_error_rate,
                             errors={"_": errors} if errors else {},
                             metrics={"inserts": result.inserts_total, "inserts_failed": result.inserts_failed,
                                      "sample_rows": result.rows},
                             prompts=sent, responses=raw, excerpts={"_": sample_sql(out.tables)})

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        samples = [SampleTable.model_validate(t) for t in artifact["tables"]]
        with atomic_path(ctx.store.path(ctx.scenario, "initial.db")) as tmp_db:
            result = build_database(tmp_db, load_schema(ctx), samples,
                                    now=environment_now(ctx.store.scenario_dir(ctx.scenario)))  # a fixed clock
        ctx.store.write_json(ctx.scenario, "sample.json", artifact)
        ctx.store.write_text(ctx.scenario, "sample.sql", sample_sql(samples))
        return {"sample_rows": result.rows, "inserts": result.inserts_total, "inserts_failed": result.inserts_failed}


class ApiSpecStage:
    name, threshold = "api_spec", 0.0

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, desc = scenario_info(ctx)
        tables = load_schema(ctx)
        text, sent, raw = _single_call(ctx, self.name, prompts.api_spec(
            name, desc, load_tasks(ctx), schema_sql(tables), ctx.corrections()))
        spec = parse_model(text, ApiSpec)
        ops = spec.operation_ids()
        known_tables = {t.name for t in tables}
        errors = [f"operation_id {op!r} is used {ops.count(op)} times" for op in sorted(set(ops)) if ops.count(op) > 1]
        for g in spec.api_groups:
            for ep in g.endpoints:
                if not ep.path.startswith("/"):
                    errors.append(f"{ep.operation_id}: path {ep.path!r} must start with '/'")
                errors += [f"{ep.operation_id}: required table {t!r} is not in the schema"
                           for t in ep.required_tables if t not in known_tables]
        endpoints = len(ops)
        return AttemptResult(artifact=spec.model_dump(mode="json"), error_rate=min(1.0, len(errors) / max(endpoints, 1)),
                             errors={"_": errors} if errors else {}, metrics={"endpoints": endpoints},
                             prompts=sent, responses=raw, excerpts={"_": text})

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        ctx.store.write_json(ctx.scenario, "api_spec.json", artifact)
        return {"endpoints": len(ApiSpec.model_validate(artifact).operation_ids())}


class EnvCodeStage:
    name, threshold = "env_code", 0.0

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, desc = scenario_info(ctx)
        spec = ctx.store.read_json(ctx.scenario, "api_spec.json")
        expected = ApiSpec.model_validate(spec).operation_ids()
        text, sent, raw = _single_call(ctx, self.name, prompts.env_code(
            name, desc, schema_sql(load_schema(ctx)), spec, ctx.corrections()))
        code = extract_code(text)
        return self.evaluate(ctx, code, expected, prompts=sent, responses=raw)

    def evaluate(self, ctx: AttemptContext, code: str, expected: list[str], **fields: Any) -> AttemptResult:
        """Execute `code` in the env-check worker with the tool probe; import errors, missing tools and
        tools answering 5xx on valid input are the attempt's errors."""
        from awm_rl.quality.check_results import CheckResults
        from awm_rl.quality.envcheck import check_env_code

        initial = ctx.store.path(ctx.scenario, "initial.db")
        check = check_env_code(code, initial, expected_tools=expected,
                               timeout_s=ctx.settings.env_check_timeout_s, probe=True)
        CheckResults(ctx.store, ctx.scenario, code, initial).keep_probe(check.probe)  # for the quality gate
        errors: list[str] = []
        if not check.ok and check.error:
            errors.append(check.error)
        errors += [f"spec operation {op!r} is not served as a tool (no route with operation_id={op!r})"
                   for op in check.missing_tools]
        probe = check.probe or {}
        # A 5xx on valid input is an execution error like an import error (quality gate, tool probe).
        broken = {n: t for n, t in probe.items() if t["status"] == "server_error"}
        errors += [probe_error_line(n, t) for n, t in broken.items()]
        error_rate = 1.0 if (check.error and not check.tools) else len(check.missing_tools) / max(len(expected), 1)
        if check.error and check.tools:
            error_rate = max(error_rate, 1 / max(len(expected), 1))
        error_rate = max(error_rate, len(broken) / max(len(expected), 1))
        edge = {n: t for n, t in probe.items() if t["status"] == "server_error_on_edge"}
        return AttemptResult(artifact={"code": code, "tool_specs": check.tool_specs}, error_rate=error_rate,
                             errors={"_": errors} if errors else {},
                             metrics={"tools": len(check.tools), "lines_of_code": len(code.splitlines()),
                                      "missing_tools": list(check.missing_tools),
                                      "import_ms": round(check.import_ms or 0, 1),
                                      "accepts_database_url": check.accepts_database_url,
                                      "tools_server_error": len(broken), "tools_server_error_on_edge": len(edge),
                                      "tools_probed_ok": sum(1 for t in probe.values() if t["status"] == "ok"),
                                      "tool_status": {n: t["status"] for n, t in probe.items()}},
                             excerpts={"_": code}, **fields)

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        ctx.store.write_text(ctx.scenario, "server.py", artifact["code"])
        store_tool_specs(ctx.store, ctx.scenario, artifact["code"], artifact.get("tool_specs") or [])
        return {"lines_of_code": len(artifact["code"].splitlines())}


def with_task_rows(excerpt: str, db_path: Path, task: str) -> str:
    """The database excerpt plus the rows holding the values the task mentions (`context.task_rows`)."""
    rows = task_rows(db_path, task)
    return excerpt + (f"\n\nRows holding values the task mentions:\n{rows}" if rows else "")


def probe_error_line(tool: str, report: dict[str, Any]) -> str:
    """One tool's server errors for the error summary: the arguments sent and where the code failed."""
    shown = [e for e in report["errors"] if e["status_code"] >= 500][:2]
    calls = "; ".join(f"arguments {json.dumps(e['args'], ensure_ascii=False)[:300]} -> HTTP {e['status_code']}: "
                      f"{str(e['error'])[:600]}" for e in shown)
    return f"tool {tool!r} ({report.get('method', '')} {report.get('path', '')}) fails on valid input: {calls}"


class VerifiersStage:
    """One LLM call per task; a retry regenerates only the verifiers that failed before."""

    name, threshold = "verifiers", 0.0

    def attempt(self, ctx: AttemptContext) -> AttemptResult:
        name, _ = scenario_info(ctx)
        task_list = load_tasks(ctx)
        schema = schema_sql(load_schema(ctx))
        kept = {}
        if ctx.previous:
            last = ctx.previous[-1]
            failed = set((last.get("errors") or {}).keys())
            for entry in (last.get("artifact") or {}).get("verifiers", []):
                if f"task_{entry['task_idx']}" not in failed:
                    kept[entry["task_idx"]] = entry
        entries, sent, raw, errors, excerpts = [], {}, {}, {}, {}
        # The initial data, within a budget: verifiers then query real names and values, not guessed ones.
        database = database_excerpt(ctx.store.path(ctx.scenario, "initial.db"), max_chars=8000)
        tools = tool_specs(ctx.store, ctx.scenario, ctx.settings) if len(kept) < len(task_list) else []
        for idx, task in enumerate(task_list):
            item = f"task_{idx}"
            if idx in kept:
                entries.append(kept[idx])
                continue
            messages = prompts.verifier(name, idx, task, schema, ctx.corrections(item),
                                        with_task_rows(database, ctx.store.path(ctx.scenario, "initial.db"), task),
                                        tools)
            response = ctx.llm.chat(messages, tag=ctx.tag(self.name, item))
            sent[item], raw[item] = messages, response.text
            try:
                out = parse_model(response.text, VerifierOutput)
            except ValueError as exc:
                errors[item] = [str(exc)]
                excerpts[item] = response.text
                continue
            entries.append({"task_idx": idx, "task": task, "file": "gen_verifier", "code": out.python_code,
                            "functions": verifier_functions(out.python_code), "reasoning": out.reasoning,
                            "success_criteria": out.success_criteria, "failure_criteria": out.failure_criteria,
                            "reference_solution": out.reference_solution.model_dump() if out.reference_solution else None,
                            "raw_response": response.text})
            excerpts[item] = out.python_code
        initial = ctx.store.path(ctx.scenario, "initial.db")
        fresh = [e for e in entries if e["task_idx"] not in kept]
        vacuous = do_nothing_check(fresh, initial, errors, ctx.settings.verifier_timeout_s)
        solved = self._check_solutions(ctx, [e for e in fresh if f"task_{e['task_idx']}" not in errors], errors)
        good = [e for e in entries if f"task_{e['task_idx']}" not in errors]
        bad_count = len(task_list) - len(good)
        return AttemptResult(artifact={"verifiers": entries} if entries else None,
                             error_rate=bad_count / max(len(task_list), 1), errors=errors,
                             metrics={"verifiers": len(good), "vacuous": len(vacuous), "solutions_proven": solved,
                                      "regenerated": len(task_list) - len(kept)},
                             prompts=sent, responses=raw, excerpts=excerpts)

    @staticmethod
    def _check_solutions(ctx: AttemptContext, entries: list[dict[str, Any]], errors: dict[str, list[str]]) -> int:
        """Run each new verifier's reference solution on the environment (quality gate, solvability): a
        solution that fails, or after which the code-mode verifier does not say complete, makes that
        task's verifier regenerate. Returns how many solutions were proven."""
        runnable = {e["task_idx"]: (e["code"], e["reference_solution"]) for e in entries
                    if e.get("reference_solution") and "verify_task_completion" in e["functions"]}
        failures, _, error = prove_solutions(ctx, runnable)
        for idx, failure in failures.items():
            if failure:
                errors.setdefault(f"task_{idx}", []).append(
                    failure + "\nFix the verifier or the solution so that a correct agent passes.")
        if error:
            errors.setdefault("_", []).append(f"reference solutions could not run: {error}")
        return sum(1 for f in failures.values() if f is None)

    def commit(self, ctx: AttemptContext, artifact: Any) -> dict[str, Any]:
        ctx.store.write_json(ctx.scenario, "verifiers.json", artifact)
        return {"verifiers": len(artifact["verifiers"])}


def do_nothing_check(entries: list[dict[str, Any]], initial: Path, errors: dict[str, list[str]],
                     timeout_s: float) -> set[int]:
    """Run each verifier on the unchanged initial database (the do-nothing agent), code mode once per
    answer of the audit's `PROBE_ANSWERS` (the verifier prompt names the same answers): a crash or a
    "complete" is an error of that task. Returns the tasks whose verifier passed vacuously."""
    from awm_rl.isolation.verification import VerifierJob, run_verifiers
    from awm_rl.reward.audit import PROBE_ANSWERS

    jobs, owners = [], []
    for e in entries:
        if not e["functions"]:
            errors[f"task_{e['task_idx']}"] = ["defines neither verify_task nor verify_task_completion"]
            continue
        for fn in e["functions"]:
            for answer in (PROBE_ANSWERS if fn == "verify_task_completion" else (None,)):
                jobs.append(VerifierJob(code=e["code"], initial_db=initial, final_db=initial, function=fn,
                                        final_answer=answer))
                owners.append(e["task_idx"])
    vacuous: set[int] = set()
    crashed: set[tuple[int, str]] = set()
    for idx, job, out in zip(owners, jobs, run_verifiers(jobs, timeout_s=timeout_s), strict=True):
        item = f"task_{idx}"
        if not out.ok and (idx, job.function) not in crashed:
            crashed.add((idx, job.function))
            errors.setdefault(item, []).append(f"{job.function} failed on the unchanged initial database "
                                               f"({out.error_kind}): {out.error}")
        elif job.function == "verify_task_completion" and out.verdict == "complete" and idx not in vacuous:
            vacuous.add(idx)
            errors.setdefault(item, []).append(vacuous_line(job.final_answer, out.result))
    return vacuous


def vacuous_line(final_answer: str | None, result: dict | None) -> str:
    """Why a verifier passes for the do-nothing agent: the answer it was given and everything it returned."""
    return (f"verify_task_completion reports 'complete' on the unchanged initial database with final_answer="
            f"{final_answer!r} (passes for an agent that does nothing); it returned: {_cut_json(result, 1500)}")


def _cut_json(value: Any, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ...(cut)"


def prove_solutions(ctx: AttemptContext, runnable: dict[int, tuple[str, dict[str, Any]]], *,
                    initial: Path | None = None) -> tuple[dict[int, str | None], set[int], str | None]:
    """Run reference solutions (task_idx -> (verifier code, solution)) each on a fresh instance of the
    stored environment, then the code-mode verifier on the database it left. Per task: None when the
    verifier says complete and no call failed with a 5xx or named an unknown tool (the quality gate's rule,
    `report._solvability`), else why not (`awm_rl.quality.solutions.solution_feedback`: the calls with
    their answers, the verifier's returned dict, the rows it reads that changed); and an error when the
    environment could not run; and the tasks whose solution calls all answered 2xx (clean runs). `initial`:
    another initial database than the stored one (a proposed data change, `datafix.py`)."""
    from awm_rl.isolation.verification import VerifierJob, run_verifiers
    from awm_rl.quality.check_results import CheckResults
    from awm_rl.quality.envcheck import check_env_code
    from awm_rl.quality.solutions import broken_call, solution_feedback

    server = ctx.store.path(ctx.scenario, "server.py")
    if not runnable or not server.is_file():
        return {}, set(), None
    out: dict[int, str | None] = {}
    clean: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="awm-solutions-") as tmp:
        code, db = server.read_text(encoding="utf-8"), initial or ctx.store.path(ctx.scenario, "initial.db")
        solutions = {k: sol for k, (_, sol) in runnable.items()}
        check = check_env_code(code, db, timeout_s=ctx.settings.env_check_timeout_s,
                               solutions=solutions, snapshot_dir=Path(tmp))
        runs = check.solutions or {}
        CheckResults(ctx.store, ctx.scenario, code, db).keep_solution_runs(solutions, runs)  # for the quality gate
        jobs = [VerifierJob(code=runnable[int(k)][0], initial_db=Path(r["initial_db"]), final_db=Path(r["final_db"]),
                            final_answer=r.get("final_answer")) for k, r in runs.items()]
        outcomes = run_verifiers(jobs, timeout_s=ctx.settings.verifier_timeout_s)
        for (k, run), outcome in zip(runs.items(), outcomes, strict=True):
            if all(c["status"] < 400 for c in run["calls"]):
                clean.add(int(k))
            if outcome.ok and outcome.verdict == "complete" and broken_call(run) is None:
                out[int(k)] = None
                continue
            verdict = outcome.verdict or f"{outcome.error_kind}: {outcome.error}"
            out[int(k)] = solution_feedback(run, runnable[int(k)][0], verdict, outcome.result)
    return out, clean, (None if check.solutions is not None else check.error or "the environment worker ended early")


def build_stage(name: str, settings: SynthesisConfig):
    """The stage object for `name`, with thresholds from settings."""
    if name == "db_schema":
        return SchemaStage(settings.schema_threshold)
    if name == "sample_data":
        return SampleDataStage(settings.sample_threshold)
    return {"tasks": TasksStage, "api_spec": ApiSpecStage, "env_code": EnvCodeStage, "verifiers": VerifiersStage}[name]()
