"""The `awm` command (Typer): import/export/catalog/synth/repair here; serving, rollouts, audits, quality,
benchmarks, BFCL and training forward their arguments to the plain `awm_rl` command modules."""

from __future__ import annotations

import importlib
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(name="awm", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  help="Agent World Model: synthesize, check, repair, serve and train on tool-use environments.")
bench_app = typer.Typer(no_args_is_help=True, help="benchmarks with JSON out (ratios against an in-run baseline)")
audit_app = typer.Typer(no_args_is_help=True, help="audits of stored environments")
eval_app = typer.Typer(no_args_is_help=True, help="evaluation on the catalog and external benchmarks")
app.add_typer(bench_app, name="bench")
app.add_typer(audit_app, name="audit")
app.add_typer(eval_app, name="eval")

# Commands whose options live in awm_rl (argparse there, so they run without this package): name -> module, function.
FORWARDED = {
    (app, "rollout"): ("awm_rl.evaluation.commands", "rollout_main", "one episode of a policy, judged; writes the trajectory"),
    (app, "train"): ("awm_rl.training.commands", "train_main", "GRPO on the catalog through Ray (--config FILE)"),
    (app, "quality"): ("awm_rl.quality.commands", "quality_main", "the quality gate: tools probed, tasks checked"),
    (bench_app, "serve"): ("benchmarks.serve", "main", "environment runtime vs one process per instance"),
    (bench_app, "quality"): ("awm_rl.quality.commands", "bench_quality_main", "probe cost per environment"),
    (bench_app, "scale"): ("benchmarks.scale", "main", "import and catalog at AWM-1K size (--scenarios N)"),
    (bench_app, "repair"): ("benchmarks.repair", "main", "the repair loop on recorded runs: calls, attempts, tasks proven"),
    (bench_app, "learn"): ("benchmarks.learn", "main", "GRPO from a tiny model on demo tasks: pass rate per step"),
    (bench_app, "rollout"): ("benchmarks.rollout", "main", "N concurrent episodes end to end: loop, pool, verifiers"),
    (audit_app, "verifiers"): ("awm_rl.reward.commands", "audit_main", "every verifier on its unchanged database"),
    (eval_app, "catalog"): ("awm_rl.evaluation.commands", "catalog_main", "a policy on the catalog: pass@1/pass@k, cost, resumable"),
    (eval_app, "bfcl"): ("awm_rl.bfcl.commands", "main", "BFCL's categories through the agent loop, and BFCL's overall"),
    (eval_app, "tau2"): ("awm_rl.tau2.commands", "main", "τ²-bench domains through the agent loop, τ²'s evaluator"),
    (eval_app, "mcp-universe"): ("awm_rl.mcp_universe.commands", "main",
                                 "MCP-Universe tasks through the agent loop, its evaluators; live servers named, skipped"),
}
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _forwarder(module: str, func: str, help_text: str):
    def command(ctx: typer.Context) -> None:
        code = int(getattr(importlib.import_module(module), func)(list(ctx.args)) or 0)
        raise typer.Exit(code)

    command.__doc__ = f"{help_text} (see --help)"
    return command


for (group, name), (module, func, help_text) in FORWARDED.items():
    group.command(name, context_settings=PASS_THROUGH, add_help_option=False)(_forwarder(module, func, help_text))


@app.command("serve", context_settings=PASS_THROUGH, add_help_option=False)
def serve(ctx: typer.Context) -> None:
    """one environment as an MCP server with a reset tool; --openenv: the catalog over OpenEnv's protocol (see --help)"""
    args = list(ctx.args)
    if "--openenv" in args:  # sessions as pool instances, judged at the end (awm_rl.integrations sits above runtime)
        from awm_rl.integrations.openenv_server import main as openenv_main

        raise typer.Exit(int(openenv_main([a for a in args if a != "--openenv"]) or 0))
    from awm_rl.runtime.commands import serve_main

    raise typer.Exit(int(serve_main(args) or 0))


def _emit(obj, as_json: bool, text: str) -> None:
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str) if as_json else text)


def _fail(command: str, message: str, code: int = 2) -> None:
    typer.echo(f"awm {command}: {message}", err=True)
    raise typer.Exit(code)


@app.callback()
def main_options(home: Optional[Path] = typer.Option(None, "--home", help="artifact store root (default $AWM_HOME "
                                                                            "or <project>/.awm_home)")) -> None:
    if home:
        os.environ["AWM_HOME"] = str(home.resolve())


@app.command("import")
def import_(src: Path = typer.Argument(..., help="folder of AWM JSONL files (e.g. AgentWorldModel-1K)"),
            as_json: bool = typer.Option(False, "--json"),
            no_dagster: bool = typer.Option(False, "--no-dagster", help="only fill the store; register no partitions"),
            replace: bool = typer.Option(False, "--replace", help="replace scenarios imported from another folder or "
                                                                  "synthesized (default: keep them, report it)")) -> None:
    """Import a folder of AWM JSONL files into the store and Dagster (a partition per scenario); a re-imported
    scenario is replaced whole (every stage from the new source) or not at all. An import of a few complete
    scenarios (at most 4) also runs the quality gate on them and refreshes the catalog."""
    from awm_assets.importing import check_imported, import_into_dagster
    from awm_assets.instance import get_instance
    from awm_resources.progress import progress_bar
    from awm_resources.store import ArtifactStore

    if not src.is_dir():
        _fail("import", f"{src} is not a folder")
    store = ArtifactStore()
    try:
        with progress_bar("importing", None) as advance:
            report = import_into_dagster(src, store, None if no_dagster else get_instance(),
                                         progress=lambda key, total: advance(key, total=total), replace=replace)
    except FileNotFoundError as exc:
        _fail("import", str(exc))
    checked = check_imported(store, report)
    run = None
    if checked and not no_dagster:  # a few checked scenarios: the catalog too, while Dagster is loaded anyway
        from awm_assets.inprocess import refresh_catalog

        run = refresh_catalog(get_instance())
    lines = [f"imported {len(report.scenarios)} scenario(s) from {src} into {store.root}"]
    for key, s in report.scenarios.items():
        lines.append(f"  {key}: present {[st for st in s.stages if st != 'scenario']}, missing {s.missing}")
    if report.issues:
        lines.append(f"{len(report.issues)} issue(s):")
        lines += [f"  {i}" for i in report.issues]
    if checked != []:
        lines.append("quality gate: left to `awm catalog --refresh`" if checked is None else "quality gate:")
    lines += [f"  {r['scenario']}: {r['tools_ok']}/{r['tools_total']} tools ok, {r['tools_server_error']} with 5xx on "
              f"valid input; {r.get('eligible_tasks', 0)}/{len(r.get('tasks', []))} tasks eligible"
              + (f"; {r['error']}" if r.get("error") else "") for r in checked or []]
    if run is not None:
        lines.append(f"catalog refreshed (refresh_catalog run {run.run_id})" if run.success else
                     f"the refresh_catalog run {run.run_id} failed; see it in the Dagster UI")
    _emit({**report.to_dict(), "quality": checked, "catalog_run": run and {"run_id": run.run_id, "success": run.success}},
          as_json, "\n".join(lines))


@app.command()
def export(dest: Path = typer.Argument(..., help="folder to write AWM JSONL files into"),
           scenarios: Optional[list[str]] = typer.Option(None, "--scenarios", help="only these (repeat the option)"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Write the store back as AWM JSONL files."""
    from awm_resources.interop import export_awm_dir
    from awm_resources.store import ArtifactStore

    written = export_awm_dir(ArtifactStore(), dest, scenarios or None)
    _emit(written, as_json, "\n".join(f"{f}: {n} lines" for f, n in written.items()) or "nothing to export")


@app.command()
def catalog(as_json: bool = typer.Option(False, "--json"),
            ready: bool = typer.Option(False, "--ready", help="only ready environments"),
            refresh: bool = typer.Option(False, "--refresh", help="first run the quality gate and rebuild catalog.json "
                                                                  "(the refresh_catalog job; what training reads), "
                                                                  "unless nothing changed since the last refresh"),
            versions: bool = typer.Option(False, "--versions", help="the kept catalog versions instead (what `awm train "
                                                                    "--catalog-version` takes): digest, when, size, "
                                                                    "what changed vs the current catalog")) -> None:
    """Scenarios with statistics and readiness (or, with --versions, the kept catalog versions)."""
    from awm_assets.synthesis.catalog import build_catalog, catalog_up_to_date, written_catalog
    from awm_resources.store import ArtifactStore

    if versions and ready:
        _fail("catalog", "--ready does not apply to --versions: a kept catalog version holds only ready environments")
    # The refresh_catalog job (quality gate + catalog.json), recorded in the Dagster instance; none when its
    # files were written from the store as it is now (it would write them again), which needs no Dagster.
    store = ArtifactStore()
    if refresh and not catalog_up_to_date(store):
        from awm_assets.inprocess import bound_store, refresh_catalog
        from awm_assets.instance import get_instance

        result = refresh_catalog(get_instance())
        if not result.success:
            _fail("catalog", f"the refresh_catalog run {result.run_id} failed; see it in the Dagster UI", 1)
        store = bound_store()
    if versions:
        _catalog_versions(store, as_json)
        return
    entries = written_catalog(store) if refresh else build_catalog(store)
    if ready:
        entries = [e for e in entries if e["ready"]]
    text = "\n".join(f"{e['name']:40s} {'ready' if e['ready'] else 'not ready':9s} tasks={e['tasks']} tables={e['tables']} "
                     f"tools={e['tools']} verifiers={e['verifiers']} source={e['source']}" for e in entries)
    _emit(entries, as_json, text or "the store is empty")


def _catalog_versions(store, as_json: bool) -> None:
    from awm_resources.documents import DocumentError
    from awm_resources.provenance import describe_catalog_versions, versions_dir

    try:
        kept = describe_catalog_versions(store)
    except DocumentError as exc:  # catalog.json itself unreadable: nothing to compare with
        _fail("catalog", str(exc))
    lines = []
    for v in kept:
        if "problem" in v:
            lines.append(f"{v['digest']}  unreadable: {v['problem']}")
            continue
        changed = v["changed_vs_current"]
        diff = ("current" if v["current"] else "no catalog.json to compare with" if changed is None else
                "changed vs current: " + (", ".join(
                    f"{c['environment']} ({c['version'] or 'absent'} -> {c['current'] or 'absent'})" for c in changed)
                    or "none (same environments, other left-out tasks)"))
        lines.append(f"{v['digest']}  {v['kept_at']}  {v['environments']} environments, {v['trainable_tasks']} tasks"
                     f"  {diff}")
    _emit(kept, as_json, "\n".join(lines) or f"no kept catalog versions under {versions_dir(store)}; "
          "run `awm catalog --refresh` or materialize environment_catalog")


@app.command()
def synth(seed_batch: Path = typer.Option(..., "--seed-batch", help="seed file (.jsonl or .txt)"),
          workers: int = typer.Option(2, "--workers", help="scenarios synthesized in parallel"),
          resynthesize: bool = typer.Option(False, "--all", help="re-synthesize the batch's existing scenarios too"),
          cluster: Optional[bool] = typer.Option(None, "--cluster/--in-process",
                                                 help="launch each run whole onto Ray through the instance's run "
                                                      "launcher (dagster.cluster.yaml) and wait for them; default: "
                                                      "--cluster when RAY_ADDRESS is set and the instance has the Ray "
                                                      "launcher"),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Synthesize a seed batch headlessly: the same jobs as the UI, into the same Dagster instance."""
    from awm_assets.inprocess import synthesize_batch, synthesize_batch_on_cluster
    from awm_assets.synthesis.seeds import SeedFileError
    from awm_resources.progress import progress_bar

    if cluster is None:
        cluster = bool(os.environ.get("RAY_ADDRESS")) and _instance_launches_on_ray()
    try:
        with progress_bar("synthesizing", None) as advance:
            out = (synthesize_batch_on_cluster(seed_batch, resynthesize=resynthesize, progress=advance) if cluster else
                   synthesize_batch(seed_batch, workers=workers, resynthesize=resynthesize, progress=advance))
    except SeedFileError as exc:
        _fail("synth", str(exc))
    except RuntimeError as exc:  # cluster mode: no Ray launcher, or a run that could not be followed
        from awm_assets.cluster_runs import ClusterRunError

        if not isinstance(exc, ClusterRunError):
            raise
        _fail("synth", str(exc))
    lines = [f"seed batch {out['seed_batch']}: new scenarios {out['new_scenarios']}"]
    for s in out["scenarios"]:
        stages = ", ".join(f"{k}={v['status']}/{v['attempts']}" for k, v in s["stages"].items())
        lines.append(f"  {s['scenario']}: {'ready' if s['ready'] else 'NOT READY'} ({stages})")
    _emit(out, as_json, "\n".join(lines))
    if not (out.get("generation_ok") and all(s["ready"] for s in out["scenarios"])):
        raise typer.Exit(1)


def _instance_launches_on_ray() -> bool:
    """Whether the instance `awm` uses has the Ray run launcher (awm synth then defaults to --cluster)."""
    from awm_assets.cluster_runs import launches_on_ray
    from awm_assets.instance import get_instance

    return launches_on_ray(get_instance())


@app.command()
def evolve(rounds: int = typer.Option(1, "--rounds", min=1, help="rounds, each evaluate -> weaknesses -> targeted "
                                                                 "batch -> synthesis -> gate -> catalog"),
           policy: str = typer.Option(..., "--policy", help="the evaluated policy, required (as the evaluation "
                                                            "asset takes it: tiny, chat:<model>, transformers:<path>, "
                                                            "...; `reference` solves every task: no weakness to aim at)"),
           tasks_per_env: int = typer.Option(3, "--tasks-per-env", min=1, help="tasks evaluated per environment"),
           max_new: int = typer.Option(1, "--max-new", min=1, help="cap on new scenarios per targeted batch"),
           candidates: int = typer.Option(3, "--candidates", min=1, help="candidate scenarios asked for per batch"),
           workers: int = typer.Option(2, "--workers", help="scenarios synthesized in parallel"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Synthesis aimed at what the policy fails: per round the evolve_round job, then the targeted batch
    synthesized like `awm synth` and the catalog refreshed; prints each round's weaknesses, batch and catalog size."""
    from awm_assets.inprocess import evolve as run_evolve
    from awm_resources.progress import progress_bar

    with progress_bar("evolving", None) as advance:
        out = run_evolve(rounds, policy=policy, tasks_per_env=tasks_per_env, max_new_scenarios=max_new,
                         candidates=candidates, workers=workers, progress=advance)
    lines = []
    for r in out["rounds"]:
        weak = ", ".join(f"{w['dimension']}={w['key']} {w['failed']}/{w['episodes']}" for w in r["weaknesses"]) or "none"
        lines.append(f"round {r['round']}: weaknesses {weak}; seed batch {r['seed_batch'] or '-'}; new scenarios "
                     f"{r['new_scenarios'] or '-'}; catalog {r['catalog_before']} -> {r['catalog_after']}"
                     + (f"; ERROR: {r['error']}" if r.get("error") else f"; {r['reason']}" if r.get("reason") else ""))
    _emit(out, as_json, "\n".join(lines))
    if any(r.get("error") for r in out["rounds"]):
        raise typer.Exit(1)


class Phase(str, Enum):
    env_code = "env_code"
    verifiers = "verifiers"
    solutions = "solutions"


@app.command()
def repair(scenarios: Optional[list[str]] = typer.Argument(None, help="default: every stored scenario with env code"),
           attempts: int = typer.Option(3, "--attempts", help="LLM attempts per phase after the stored artifact"),
           phases: Optional[list[Phase]] = typer.Option(None, "--phase", "--phases",
                                                       help="env_code, verifiers, solutions (repeat; default: all)"),
           tasks: Optional[list[int]] = typer.Option(None, "--task", "--tasks",
                                                     help="limit verifier and solution repair to these (repeat)"),
           no_dagster: bool = typer.Option(False, "--no-dagster", help="an ephemeral instance (not shown in the UI)"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Repair stored environments with the configured LLM (the repair_environment job): env code answering 5xx on
    valid input, unusable verifiers, tasks without a proven reference solution."""
    import dagster as dg

    from awm_assets.inprocess import bound_store, repair_scenarios
    from awm_assets.instance import get_instance
    from awm_assets.synthesis.repair import repair_table
    from awm_resources.progress import progress_bar

    store = bound_store()
    names = scenarios or [s for s in store.list_scenarios() if store.has(s, "server.py")]
    unknown = [s for s in names if not store.has(s, "server.py")]
    if unknown:
        _fail("repair", f"no stored env code (server.py) for {unknown} in {store.root}")
    config = {"attempts": attempts, "phases": [p.value for p in phases] if phases else [p.value for p in Phase],
              "tasks": list(tasks or [])}
    instance = dg.DagsterInstance.ephemeral() if no_dagster else get_instance()
    with progress_bar("repairing", len(names)) as advance:
        reports = repair_scenarios(names, config, instance, progress=advance)
    done = [r for r in reports if "before" in r]
    text = repair_table(done) if done else ""
    text += "".join(f"\n{r['scenario']}: FAILED: {r['error']}" for r in reports if "before" not in r)
    _emit({"scenarios": reports}, as_json, text.strip() or "nothing to repair")
    if not all("before" in r and not r.get("error") for r in reports):
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (tests call this in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        app(args=argv, prog_name="awm")  # standalone: usage errors print with the usage line, exit 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ValueError as exc:  # a bad AWM_* variable: its message names it (settings imported on this path only)
        from awm_resources.settings import SettingsError

        if not isinstance(exc, SettingsError):
            raise
        print(f"awm: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
