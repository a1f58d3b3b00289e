"""Run a policy over a BFCL category through our agent loop and score it with BFCL's checker.

`evaluate_bfcl()` loads the cases, builds the policy (`ground_truth` or anything `make_policy`
builds, plus `grpo_latest`), runs one multi-turn episode per case with `run_episodes` against a
`BFCLEnvironment`, scores each with `score_case` (BFCL's `multi_turn_checker`) and writes, under
`out_dir`: `cases/<id>.json` (the whole trajectory, the calls as BFCL decodes them, their
execution results, the backends' final state and BFCL's verdict), `report.json` and
`accuracy.png`. The loop runs with BFCL's conventions: the whole history is shown (no window), at
most twice BFCL's MAXIMUM_STEP_LIMIT steps per user turn (plus list_tools and the answer: our
protocol makes one call per step where BFCL's harness lets a step hold parallel calls, and one
long_context answer has 34 calls in a turn), an undecodable turn ends that user turn (the policy is
told which rule it broke), and the rules of our training protocol that BFCL's harness does not
have are not enforced: `reasoning`, `no_successful_call` and `arguments_schema` (BFCL executes the
call as given and its backend answers with the error). Tool answers are shown whole (long_context's
run past 30,000 characters; BFCL does not cut them).
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
from awm_rl.bfcl.data import MULTI_TURN_CATEGORIES, PAPER_TABLE4, BFCLCase, is_multi_turn, load_cases
from awm_rl.bfcl.environment import BFCLEnvironment
from awm_rl.bfcl.ground_truth import ground_truth_policy
from awm_rl.bfcl.scoring import score_case

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
                 cache_dir: Path | None = None) -> Policy:
    """`ground_truth` replays BFCL's possible answers; `grpo_latest` is the newest trained checkpoint
    (transformers; `vllm:grpo_latest` on a GPU); everything else goes to `make_policy`."""
    if spec == "ground_truth":
        return ground_truth_policy(cases)
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
                           cache_dir=cache_dir)
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

    def summary(self) -> dict[str, Any]:
        return {"category": self.category, "policy": self.policy, "cases": self.cases, "accuracy": self.accuracy,
                "per_case": self.per_case, "error_types": self.error_types, "out_dir": self.out_dir,
                "wall_s": self.wall_s, "plot": self.plot}


def loop_config(case: BFCLCase, max_steps_per_turn: int | None = None) -> LoopConfig:
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    per_turn = (max_steps_per_turn if max_steps_per_turn is not None else 2 * MAXIMUM_STEP_LIMIT) + 2
    return LoopConfig(max_turns=per_turn * len(case.turns), window=None, system_prompt=BFCL_SYSTEM_PROMPT,
                      max_turns_per_user_turn=per_turn, format_error="next_user_turn", max_tool_text=None,
                      waived_rules=frozenset({"reasoning", "no_successful_call", "arguments_schema"}))


def evaluate_bfcl(category: str, policy: str | Policy, *, out_dir: Path, limit: int | None = None,
                  ids: list[str] | None = None, concurrency: int = 4, max_steps_per_turn: int | None = None,
                  store_root: Path | None = None, **policy_kwargs: Any) -> BFCLReport:
    """Run and score; see the module docstring for what lands in `out_dir`."""
    if not is_multi_turn(category) or category not in MULTI_TURN_CATEGORIES:
        raise BFCLPolicyError(f"unsupported BFCL category {category!r}: use one of {', '.join(MULTI_TURN_CATEGORIES)} "
                              "(the single-turn categories are not wired yet)")
    started = time.perf_counter()
    out_dir = Path(out_dir)
    cases = load_cases(category, limit=limit, ids=ids)
    if not cases:
        raise BFCLPolicyError(f"no cases selected from {category!r}")
    if isinstance(policy, str):
        policy = build_policy(policy, cases, store_root=store_root, **policy_kwargs)
    env = BFCLEnvironment(cases)
    # One config for the whole batch: the longest conversation sets max_turns.
    config = max((loop_config(c, max_steps_per_turn) for c in cases), key=lambda c: c.max_turns)
    specs = [EpisodeSpec(scenario=c.id, task_idx=c.index, task=env.first_message(c)) for c in cases]
    episodes = run_episodes(env, policy, specs, config, concurrency=concurrency)
    per_case = []
    for case, episode in zip(cases, episodes):
        state = env.finished.get(case.id)
        model_result = state["calls"] if state else []
        verdict = score_case(case, model_result, model_name=f"{env.run_tag}_{case.index}")
        error = {k: v for k, v in verdict.items() if k != "valid"}
        path = out_dir / "cases" / f"{case.id}.json"
        atomic_write_json(path, {
            "id": case.id, "category": category, "policy": policy.name, "valid": bool(verdict["valid"]),
            "bfcl_verdict": _jsonable(error), "model_result_decoded": model_result,
            "execution_results": state["results"] if state else [], "final_state": state["state"] if state else {},
            "possible_answer": case.ground_truth, "episode": json.loads(episode.model_dump_json()),
        })
        per_case.append({
            "id": case.id, "valid": bool(verdict["valid"]), "error_type": verdict.get("error_type"),
            "error": _first_line(verdict.get("error_message")), "user_turns": len(case.turns),
            "user_turns_reached": len(model_result), "steps": episode.turns,
            "calls": sum(len(step) for turn in model_result for step in turn),
            "termination": episode.termination, "termination_detail": episode.termination_detail,
            "wall_s": round(episode.wall_s, 3), "trajectory": str(path),
        })
    correct = sum(c["valid"] for c in per_case)
    errors: dict[str, int] = {}
    for c in per_case:
        if not c["valid"]:
            errors[c["error_type"] or "unknown"] = errors.get(c["error_type"] or "unknown", 0) + 1
    report = BFCLReport(category=category, policy=policy.name, cases=len(per_case),
                        accuracy=round(correct / len(per_case), 4), per_case=per_case, out_dir=str(out_dir),
                        wall_s=round(time.perf_counter() - started, 2), error_types=errors)
    report.plot = str(plot_accuracy({category: report.accuracy}, out_dir / "accuracy.png", policy=policy.name))
    atomic_write_json(out_dir / "report.json", report.summary())
    return report


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
    for bar, name in zip(bars, names):
        ax.annotate(f"{100 * accuracies[name]:.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    colors = ["#dd8452", "#55a868", "#c44e52"]
    for (model, (before, after)), color in zip(PAPER_TABLE4.items(), colors):
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
