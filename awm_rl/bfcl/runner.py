"""Run a policy over BFCL categories through our agent loop and score it with BFCL's checkers.

`evaluate_suite()` loads the cases, builds the policy (`ground_truth` or anything `make_policy`
builds, plus `grpo_latest`), runs one episode per case with `run_episodes` against a
`BFCLEnvironment` (multi-turn: BFCL's executable backends) or a `SingleTurnEnvironment` (single-turn:
calls recorded, not executed), scores multi-turn cases here with BFCL's `multi_turn_checker` and
sends the single-turn results and every category's score to BFCL's own checker and leaderboard
aggregation in bfcl-eval's environment (`checker.py`), which gives BFCL's overall. Under each
category's folder: `cases/<id>.json` (the whole trajectory, what BFCL scored, BFCL's verdict),
`report.json` and `accuracy.png`; `suite.json` and BFCL's leaderboard CSVs (`bfcl_scores/`) beside.
The loop runs with BFCL's conventions: the whole history is shown (no window), at most twice BFCL's
MAXIMUM_STEP_LIMIT steps per user turn (plus list_tools and the answer: our protocol makes one call
per step where BFCL's harness lets a step hold parallel calls, and one long_context answer has 34
calls in a turn), an undecodable turn ends that user turn (the policy is told which rule it broke),
and the rules of our training protocol that BFCL's harness does not have are not enforced:
`reasoning`, `no_successful_call` and `arguments_schema` (BFCL executes or checks the call as given).
Tool answers are shown whole (long_context's run past 30,000 characters; BFCL does not cut them).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awm_resources.store import atomic_write_json
from awm_rl.agent import EpisodeSpec, LoopConfig, Policy, run_episodes
from awm_rl.agent.policies import make_policy
from awm_rl.bfcl.checker import overall_figures, score_and_aggregate
from awm_rl.bfcl.data import ALL_CATEGORIES, PAPER_TABLE4, BFCLCase, is_multi_turn, load_cases
from awm_rl.bfcl.environment import BFCLEnvironment
from awm_rl.bfcl.ground_truth import GroundTruthError, ground_truth_policy
from awm_rl.bfcl.scoring import score_case
from awm_rl.bfcl.single_turn import SingleTurnEnvironment, model_result

BFCL_SYSTEM_PROMPT = (
    "You are an agent that carries out a user's requests with the functions of the applications in "
    "this conversation. First call list_tools once to see the functions, then use call_tool to call "
    "them, exactly one call per turn. Before every action think step by step inside <think></think>. "
    "Take argument values from the user's words and the results you get. At each user request, keep "
    "calling functions until the request is fulfilled; if no function can do it or a required detail "
    "is missing, say so instead of guessing. When the current request is done, answer without a tool "
    "call; the user may then ask for more."
)
POLICY_HELP = ("ground_truth | tiny | chat:<litellm model> | transformers:<path> | vllm:<model> | grpo_latest | "
               "vllm:grpo_latest")


class BFCLPolicyError(ValueError):
    """A policy spec this evaluation cannot build."""


def latest_grpo_model(store_root: Path) -> Path:
    """The final model of the newest GRPO run under `<store>/training/` (by its summary.json)."""
    summaries = sorted(Path(store_root).glob("training/*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    for summary in reversed(summaries):
        try:
            final = Path(json.loads(summary.read_text(encoding="utf-8"))["final_model"])
        except (OSError, ValueError, KeyError):
            continue
        if (final / "config.json").is_file():
            return final
    raise BFCLPolicyError(f"no trained model under {Path(store_root) / 'training'} (run grpo_training / awm train first)")


def build_policy(spec: str, cases: list[BFCLCase], *, store_root: Path | None = None, grpo_model: Path | None = None,
                 api_base: str | None = None, temperature: float = 1.0, max_new_tokens: int = 2048,
                 cache_dir: Path | None = None, **chat_options: Any) -> Policy:
    """`ground_truth` replays BFCL's possible answers; `grpo_latest` is the newest trained checkpoint
    (transformers; `vllm:grpo_latest` on a GPU); everything else goes to `make_policy`."""
    if spec == "ground_truth":
        try:
            return ground_truth_policy(cases)
        except GroundTruthError as exc:
            raise BFCLPolicyError(f"ground_truth: {exc}") from exc
    if spec == "reference":
        raise BFCLPolicyError("'reference' replays our own environments' solutions; for BFCL use ground_truth")
    if spec in ("grpo_latest", "vllm:grpo_latest"):
        if grpo_model is None:
            if store_root is None:
                from awm_resources.store import default_home

                store_root = default_home()
            grpo_model = latest_grpo_model(store_root)
        spec = f"{'vllm' if spec.startswith('vllm') else 'transformers'}:{grpo_model}"
    try:
        return make_policy(spec, api_base=api_base, temperature=temperature, max_new_tokens=max_new_tokens,
                           cache_dir=cache_dir, **chat_options)
    except ValueError as exc:
        raise BFCLPolicyError(f"{exc} (BFCL also takes: {POLICY_HELP})") from exc


@dataclass
class BFCLReport:
    category: str
    policy: str
    cases: int
    accuracy: float
    per_case: list[dict[str, Any]]
    out_dir: str
    wall_s: float
    error_types: dict[str, int] = field(default_factory=dict)
    plot: str | None = None
    bfcl_eval_version: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"category": self.category, "policy": self.policy, "cases": self.cases, "accuracy": self.accuracy,
                "per_case": self.per_case, "error_types": self.error_types, "out_dir": self.out_dir,
                "wall_s": self.wall_s, "plot": self.plot, "bfcl_eval_version": self.bfcl_eval_version or _version()}


@dataclass
class BFCLSuite:
    """Several categories and BFCL's own aggregation of them (`overall`: fractions from its leaderboard)."""

    policy: str
    bfcl_eval_version: str
    reports: dict[str, BFCLReport]
    overall: dict[str, Any]
    leaderboard: dict[str, dict[str, str]]
    out_dir: str
    wall_s: float
    plot: str | None = None

    def summary(self, per_case: bool = True) -> dict[str, Any]:
        categories = {c: {k: v for k, v in r.summary().items() if per_case or k != "per_case"}
                      for c, r in self.reports.items()}
        return {"policy": self.policy, "bfcl_eval_version": self.bfcl_eval_version, "categories": categories,
                "overall": self.overall, "leaderboard": self.leaderboard, "out_dir": self.out_dir,
                "wall_s": self.wall_s, "plot": self.plot}


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return None


def loop_config(case: BFCLCase, max_steps_per_turn: int | None = None) -> LoopConfig:
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    per_turn = (max_steps_per_turn if max_steps_per_turn is not None else 2 * MAXIMUM_STEP_LIMIT) + 2
    return LoopConfig(max_turns=per_turn * len(case.turns), window=None, system_prompt=BFCL_SYSTEM_PROMPT,
                      max_turns_per_user_turn=per_turn, format_error="next_user_turn", max_tool_text=None,
                      waived_rules=frozenset({"reasoning", "no_successful_call", "arguments_schema"}))


@dataclass
class _Run:
    """One category's episodes before scoring."""

    category: str
    cases: list[BFCLCase]
    episodes: list[Any]
    env: Any
    out_dir: Path
    started: float


def _run_category(category: str, policy: Policy, cases: list[BFCLCase], out_dir: Path, *, concurrency: int,
                  max_steps_per_turn: int | None) -> _Run:
    started = time.perf_counter()
    env = BFCLEnvironment(cases) if is_multi_turn(category) else SingleTurnEnvironment(cases)
    # One config for the whole batch: the longest conversation sets max_turns.
    config = max((loop_config(c, max_steps_per_turn) for c in cases), key=lambda c: c.max_turns)
    specs = [EpisodeSpec(scenario=c.id, task_idx=c.index, task=env.first_message(c)) for c in cases]
    episodes = run_episodes(env, policy, specs, config, concurrency=concurrency)
    return _Run(category=category, cases=cases, episodes=episodes, env=env, out_dir=Path(out_dir), started=started)


def _score_multi_turn(run: _Run, policy: Policy) -> list[dict[str, Any]]:
    rows = []
    for case, episode in zip(run.cases, run.episodes, strict=True):
        state = run.env.finished.get(case.id)
        model_result = state["calls"] if state else []
        verdict = score_case(case, model_result, model_name=f"{run.env.run_tag}_{case.index}")
        path = _write_case(run, case, episode, policy, bool(verdict["valid"]), {k: v for k, v in verdict.items() if k != "valid"},
                           model_result_decoded=model_result, execution_results=state["results"] if state else [],
                           final_state=state["state"] if state else {})
        rows.append({
            "id": case.id, "valid": bool(verdict["valid"]), "error_type": verdict.get("error_type"),
            "error": _first_line(verdict.get("error_message")), "user_turns": len(case.turns),
            "user_turns_reached": len(model_result), "steps": episode.turns,
            "calls": sum(len(step) for turn in model_result for step in turn),
            "termination": episode.termination, "termination_detail": episode.termination_detail,
            "wall_s": round(episode.wall_s, 3), "trajectory": str(path),
        })
    return rows


def _single_turn_results(run: _Run) -> list[dict[str, Any]]:
    """BFCL's result entries of a single-turn category (what its checker reads)."""
    # No latency: BFCL would turn it into a GPU cost, and its statistics need two cases or more.
    return [{"id": c.id, "result": model_result(run.env.finished.get(c.id, []), e.final_answer)}
            for c, e in zip(run.cases, run.episodes, strict=True)]


def _score_single_turn(run: _Run, policy: Policy, verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    failures = verdicts["failures"]
    rows = []
    for case, episode, entry in zip(run.cases, run.episodes, _single_turn_results(run), strict=True):
        failure = failures.get(case.id)
        verdict = failure or {}
        path = _write_case(run, case, episode, policy, failure is None, verdict, model_result=entry["result"])
        calls = entry["result"] if isinstance(entry["result"], list) else []
        rows.append({
            "id": case.id, "valid": failure is None, "error_type": verdict.get("error_type"),
            "error": _first_line(verdict.get("error")), "user_turns": 1, "user_turns_reached": 1, "steps": episode.turns,
            "calls": len(calls), "termination": episode.termination, "termination_detail": episode.termination_detail,
            "wall_s": round(episode.wall_s, 3), "trajectory": str(path),
        })
    return rows


def _write_case(run: _Run, case: BFCLCase, episode: Any, policy: Policy, valid: bool, verdict: dict[str, Any],
                **results: Any) -> Path:
    path = run.out_dir / "cases" / f"{case.id}.json"
    atomic_write_json(path, {"id": case.id, "category": run.category, "policy": policy.name, "valid": valid,
                             "bfcl_verdict": _jsonable(verdict), **_jsonable(results),
                             "possible_answer": case.ground_truth, "episode": json.loads(episode.model_dump_json())})
    return path


def _report(run: _Run, policy: Policy, per_case: list[dict[str, Any]], version: str | None) -> BFCLReport:
    correct = sum(c["valid"] for c in per_case)
    errors: dict[str, int] = {}
    for c in per_case:
        if not c["valid"]:
            errors[c["error_type"] or "unknown"] = errors.get(c["error_type"] or "unknown", 0) + 1
    report = BFCLReport(category=run.category, policy=policy.name, cases=len(per_case),
                        accuracy=round(correct / len(per_case), 4), per_case=per_case, out_dir=str(run.out_dir),
                        wall_s=round(time.perf_counter() - run.started, 2), error_types=errors, bfcl_eval_version=version)
    report.plot = str(plot_accuracy({run.category: report.accuracy}, run.out_dir / "accuracy.png", policy=policy.name))
    atomic_write_json(run.out_dir / "report.json", report.summary())
    return report


def evaluate_suite(categories: list[str], policy: str | Policy, *, out_dir: Path, limit: int | None = None,
                   ids: list[str] | None = None, concurrency: int = 4, max_steps_per_turn: int | None = None,
                   store_root: Path | None = None, out_dirs: dict[str, Path] | None = None,
                   **policy_kwargs: Any) -> BFCLSuite:
    """Run and score several categories; BFCL's leaderboard aggregation gives the overall.

    Multi-turn cases are scored in process (BFCL's multi_turn_checker); the single-turn results and
    every category's score go to BFCL's own checker and `generate_leaderboard_csv` in one call to
    its environment (awm_rl.bfcl.checker). Each category's files land in `out_dir/<category>/`
    (or `out_dirs[category]`), the leaderboard CSVs in `out_dir/bfcl_scores/`."""
    started = time.perf_counter()
    unknown = [c for c in categories if c not in ALL_CATEGORIES]
    if unknown:
        raise BFCLPolicyError(f"unsupported BFCL category {unknown[0]!r}: use one of {', '.join(ALL_CATEGORIES)}")
    out_dir = Path(out_dir)
    selected = {c: load_cases(c, limit=limit, ids=ids) for c in categories}
    selected = {c: cases for c, cases in selected.items() if cases}
    if not selected:
        raise BFCLPolicyError(f"no cases selected from {', '.join(categories)}")
    if isinstance(policy, str):
        policy = build_policy(policy, [c for cases in selected.values() for c in cases], store_root=store_root,
                              **policy_kwargs)
    runs = {c: _run_category(c, policy, cases, (out_dirs or {}).get(c) or out_dir / c, concurrency=concurrency,
                             max_steps_per_turn=max_steps_per_turn) for c, cases in selected.items()}
    multi = {c: _score_multi_turn(r, policy) for c, r in runs.items() if is_multi_turn(c)}
    if len(multi) == len(runs) == 1:  # one multi-turn category: scored here, no aggregate worth a call
        answer: dict[str, Any] = {"bfcl_eval_version": _version(), "categories": {}, "leaderboard": {}}
    else:
        answer = score_and_aggregate(
            {c: _single_turn_results(r) for c, r in runs.items() if not is_multi_turn(c)},
            {c: {"accuracy": sum(row["valid"] for row in rows) / len(rows), "total_count": len(rows)}
             for c, rows in multi.items()},
            display_name=policy.name, score_dir=out_dir / "bfcl_scores")
    version = answer["bfcl_eval_version"]
    reports = {}
    for category, run in runs.items():
        rows = multi[category] if category in multi else _score_single_turn(run, policy, answer["categories"][category])
        reports[category] = _report(run, policy, rows, version)
    suite = BFCLSuite(policy=policy.name, bfcl_eval_version=version, reports=reports,
                      overall=overall_figures(answer["leaderboard"]), leaderboard=answer["leaderboard"],
                      out_dir=str(out_dir), wall_s=round(time.perf_counter() - started, 2))
    if len(reports) > 1:
        suite.plot = str(plot_accuracy({c: r.accuracy for c, r in reports.items()}, out_dir / "accuracy.png",
                                       policy=policy.name))
    atomic_write_json(out_dir / "suite.json", suite.summary())
    return suite


def evaluate_bfcl(category: str, policy: str | Policy, *, out_dir: Path, **kwargs: Any) -> BFCLReport:
    """One category, its files straight under `out_dir`; see `evaluate_suite`."""
    if category not in ALL_CATEGORIES:
        raise BFCLPolicyError(f"unsupported BFCL category {category!r}: use one of {', '.join(ALL_CATEGORIES)}")
    suite = evaluate_suite([category], policy, out_dir=out_dir, out_dirs={category: Path(out_dir)}, **kwargs)
    return suite.reports[category]


def _first_line(message: Any) -> str | None:
    if isinstance(message, list):
        message = message[0] if message else None
    return None if message is None else str(message)[:500]


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def plot_accuracy(accuracies: dict[str, float], path: Path, *, policy: str) -> Path | None:
    """Bars: accuracy per category (%), with the paper's Table 4 BFCLv3 overall figures as lines."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(accuracies)
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    bars = ax.bar(names, [100 * accuracies[n] for n in names], color="#4c72b0", label=policy)
    for bar, name in zip(bars, names, strict=True):
        ax.annotate(f"{100 * accuracies[name]:.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    colors = ["#dd8452", "#55a868", "#c44e52"]
    for (model, (before, after)), color in zip(PAPER_TABLE4.items(), colors, strict=True):
        ax.axhline(after, color=color, linestyle="--", linewidth=1, label=f"paper {model} +AWM {after} (BFCLv3 overall)")
        ax.axhline(before, color=color, linestyle=":", linewidth=1, label=f"paper {model} base {before} (BFCLv3 overall)")
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"BFCL accuracy: {policy}")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
