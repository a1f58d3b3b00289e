"""`awm bench learn --json`: proof that the GRPO loop makes a policy better, on CPU in minutes.

The other CPU runs prove the mechanics (advantages, masks, log-probs); this one shows the pass rate
going up. Per seed:

1. the demo batch's environments (synthesized offline when the store lacks them, as `awm synth
   --seed-batch seeds/demo.jsonl` does);
2. per scenario, the first task whose reference solution (`seeds/solutions/`) its verifier passes and for
   which DECOYS decoys exist: the reference with one argument value changed, replayed through the real
   loop and pool and confirmed failing by the task's verifier (`awm_rl.training.decoys`);
3. a tiny Qwen3 (random init, `awm_rl.agent.tiny_model`) warm-started to convergence on the reference and decoy
   episodes of those tasks: it learns the format, and at the changed value it puts about 1/k on each of
   the k = DECOYS + 1 values (the episodes share every token before it), so about 1/k of its rollouts pass;
4. GRPO through the real job (`awm_rl.training.job.run_training`: environment pool, code-mode judge,
   `AWMGRPOTrainer`), reward -1 format error / 1 completed / 0.1 partial / 0 otherwise, on exactly those
   tasks (a copy of the catalog with the others left out).

The pass rate of a step is the fraction of its rollouts the task's verifier classifies as completed.
Prints per seed the pass rate per step, the mean of the first and last five steps, and the curve (a
PNG and an ASCII plot); the claim holds when `last - first >= 0.2` for every seed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from awm_resources.store import PROJECT_ROOT, ArtifactStore, atomic_write_json

DEMO_BATCH = PROJECT_ROOT / "seeds" / "demo.jsonl"
SOLUTIONS = PROJECT_ROOT / "seeds" / "solutions"
DEMO_SCENARIOS = ["issue_tracker", "music_playlists", "restaurant_reservations"]
WINDOW = 5  # steps averaged at each end of the curve
MIN_RISE = 0.2

# The tiny model's tokenizer also learns the tool listings the policy will read, with merges across words: a
# demo prompt is then about 0.6k tokens instead of 4.3k (the listing is most of it), which is what makes
# 10 steps of 24 rollouts fit in minutes on two cores. The prompts' text is unchanged.
TOKENIZER: dict[str, Any] = {"vocab_size": 2048, "merge_across_words": True}
# Warm start to convergence on each task's reference episode plus DECOYS decoy episodes (awm_rl.training.decoys: the
# reference with one argument value changed, replayed through the real loop and pool and confirmed failing by the task's
# verifier). AdamW (all samples per step) until, for every task, the policy sampling at temperature 1 replays one of its
# k = DECOYS + 1 episodes token for token with probability >= `coverage`: the format is learnt, and since the episodes
# share every token up to the changed value, the policy puts about 1/k on each value there (the initial pass rate).
# 0.85: about 360 steps at lr 1e-2 (0.87 after 400, measured); each further 0.01 costs ~25 steps.
WARM_START = {"max_steps": 500, "learning_rate": 1.0e-2, "coverage": 0.85}
DECOYS = 2
# The GRPO run (a TrainConfig; model.path and the paths are filled in per seed). 3 tasks x G=8 rollouts per step and
# ONE policy update per step (mini_batch_tasks = tasks_per_step): on-policy, and every group whole in its update. With
# one update per task (mini_batch_tasks 1) TRL shuffles the step's rows before splitting them
# (GRPOTrainer._prepare_inputs): an update held a random third of the turns, so the turns a group's rollouts share
# (their advantages sum to 0 only over the whole group) did not cancel within it. beta 0 (no reference model).
# learning_rate (AdamW, measured on seed 0): 1e-3 takes the pass rate from 0.33 to 0.96 in one update and breaks the
# format at the next (83% format errors); 2e-4 at temperature 1.0 rises to 0.5 in 4 steps, then format errors grow
# (46%, 54%): AdamW moves every weight by about lr whatever its gradient, which wears down the memorised format.
# temperature 0.7 (both sampling and the trainer's log-probs): the k values of the decision have equal logits, so
# they stay at ~1/k each, while the memorised format tokens get sharper (their logit margins count 1/0.7 times).
TRAIN_CONFIG: dict[str, Any] = {
    "name": "learn-bench",
    # `catalog` is the bench's own copy of the store's catalog in which every task but the one chosen per scenario
    # is left out (excluded_tasks), so the job trains on exactly the warm-started tasks.
    "environments": {"scenarios": DEMO_SCENARIOS, "verifier_audit": "catalog", "env_hosts": 1},
    "grpo": {"steps": 10, "group_size": 8, "tasks_per_step": 3, "mini_batch_tasks": 3, "micro_batch_samples": 8,
             "learning_rate": 1.0e-4, "beta": 0.0, "save_every": 1000, "save_total_limit": 1},
    "rollout": {"max_turns": 5, "history": "window", "window": 3, "max_response_tokens": 256,
                "max_context_tokens": 8192, "temperature": 0.7, "concurrency": 32, "tool_listing": "compact"},
    "judge": {"mode": "code"},
    "warm_start": {"enabled": False},
    "generation": {"backend": "transformers"},
    # One torch thread: the tiny model's ops are too small to gain from a second one, which the environment hosts
    # use instead; on a loaded machine two threads wait on each other at every parallel op.
    "ray": {"torch_threads": 1},
    "log_samples": False,
    "tensorboard": False,
}


class BenchError(RuntimeError):
    """The bench could not run: the message says what is missing and where."""


def _info(message: str) -> None:
    print(f"[bench learn] {message}", file=sys.stderr, flush=True)


# -- the demo store -------------------------------------------------------------------------------
def demo_ready(root: Path) -> bool:
    """True when `root`'s catalog lists every demo environment as ready."""
    path = root / "catalog.json"
    if not path.is_file():
        return False
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("environments") or []
    except (json.JSONDecodeError, AttributeError):
        return False
    ready = {e.get("name") for e in entries if isinstance(e, dict) and e.get("ready", True)}
    return set(DEMO_SCENARIOS) <= ready


def synthesize_demo(root: Path) -> float:
    """`awm synth --seed-batch seeds/demo.jsonl` (replay LLM, offline) into `root`; returns seconds."""
    started = time.time()
    dagster_home = root / ".dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWM_HOME": str(root), "DAGSTER_HOME": str(dagster_home)}
    proc = subprocess.run([sys.executable, "-m", "awm_assets.cli", "synth", "--seed-batch", str(DEMO_BATCH), "--json"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0 or not demo_ready(root):
        raise BenchError(f"synthesizing the demo batch into {root} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-1500:]}")
    return time.time() - started


# -- the tasks and their decoys ---------------------------------------------------------------------------
def choose_tasks(store_root: Path, out_dir: Path) -> tuple[list[Any], list[str], dict[str, Any]]:
    """Per demo scenario, the first trainable task (in task order) with a reference solution that its verifier
    passes and DECOYS decoys it fails (awm_rl.training.decoys), replayed through the real loop and pool.
    Returns those TaskDecoys, the compact tool listings (for the tokenizer) and a report of every task tried."""
    from awm_rl.agent.loop import LoopConfig, scenario_tools
    from awm_rl.reward.judge import Judge
    from awm_rl.runtime.pool import EnvironmentPool
    from awm_rl.training.decoys import build_decoys
    from awm_rl.training.rollouts import CompactToolsPool

    started = time.time()
    solutions = _solutions()
    records = trainable_tasks(store_root)
    rollout = TRAIN_CONFIG["rollout"]
    loop_config = LoopConfig(max_turns=rollout["max_turns"], window=rollout["window"],
                             snapshot_dir=out_dir / "decoy_databases")
    judge = Judge(TRAIN_CONFIG["judge"]["mode"])
    chosen: list[Any] = []
    tried: list[dict[str, Any]] = []
    pool = EnvironmentPool(store_root, num_hosts=1, prefetch=1)
    try:
        view = CompactToolsPool(pool)
        for scenario in DEMO_SCENARIOS:
            for record in [r for r in records if r.scenario == scenario]:
                solution = solutions.get((scenario, record.task_idx))
                if solution is None:
                    continue
                found = build_decoys(view, judge, record, solution, decoys=DECOYS, loop_config=loop_config,
                                     max_candidates=8)
                if found is None:
                    tried.append({"task": f"{scenario}/{record.task_idx}", "why": "the reference solution does not "
                                  "complete the task (its verifier)"})
                    continue
                tried.append({**found.report(), "chosen": len(found.decoys) == DECOYS})
                if len(found.decoys) == DECOYS:
                    chosen.append(found)
                    break
            else:
                raise BenchError(f"no task of {scenario!r} has a reference solution ({SOLUTIONS}) that its verifier "
                                 f"passes and {DECOYS} decoys it fails: {json.dumps(tried)[-1500:]}")
        listings = [json.dumps(scenario_tools(view, s), ensure_ascii=False) for s in DEMO_SCENARIOS]
    finally:
        pool.close()
    return chosen, listings, {"tasks": [f"{c.record.scenario}/{c.record.task_idx}" for c in chosen],
                              "decoys_per_task": DECOYS, "tried": tried, "wall_s": round(time.time() - started, 1)}


def _solutions() -> dict[tuple[str, int], dict[str, Any]]:
    out = {}
    for path in sorted(SOLUTIONS.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for task in doc["tasks"]:
            out[(doc["scenario"], int(task["task_idx"]))] = task
    return out


def bench_catalog(store_root: Path, chosen: list[Any], path: Path) -> Path:
    """The store's catalog with every task of the demo environments but the chosen one left out (the job then
    trains on exactly the warm-started tasks); written to `path`."""
    doc = json.loads((store_root / "catalog.json").read_text(encoding="utf-8"))
    keep = {c.record.scenario: c.record.task_idx for c in chosen}
    for entry in doc["environments"]:
        if entry.get("name") in keep:
            left_out = [i for i in range(int(entry.get("tasks") or 0)) if i != keep[entry["name"]]]
            entry["excluded_tasks"] = sorted(set(entry.get("excluded_tasks") or []) | set(left_out))
            entry["excluded_reasons"] = {**(entry.get("excluded_reasons") or {}),
                                         **{str(i): "not the task awm bench learn trains on" for i in left_out}}
            entry["trainable_tasks"] = 1
    atomic_write_json(path, doc)
    return path


# -- the warm start --------------------------------------------------------------------------------------
def warm_start(out_dir: Path, seed: int, chosen: list[Any], listings: list[str], max_steps: int,
               coverage: float) -> dict[str, Any]:
    """The tiny model built with `seed`, trained on every turn of the chosen tasks' reference and decoy episodes
    until each task's episodes together have probability >= `coverage` under the policy (see WARM_START); saved
    to `out_dir/warm_start`. Returns a report, with each task's reference probability (the share the policy
    puts on the reference: the expected initial pass rate)."""
    import math

    import torch

    from awm_rl.agent.tiny_model import build_tiny_qwen3
    from awm_rl.training.warm_start import episode_samples, supervised_steps

    started = time.time()
    torch.set_num_threads(TRAIN_CONFIG["ray"]["torch_threads"])
    rollout = TRAIN_CONFIG["rollout"]
    model, tokenizer = build_tiny_qwen3(out_dir / "models", seed=seed, extra_texts=listings, **TOKENIZER)
    index: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    samples: list[tuple[list[int], list[int]]] = []
    weights: list[float] = []
    episodes: list[tuple[int, int, list[int]]] = []  # (task, variant, its samples)
    for t, task in enumerate(chosen):
        for v, variant in enumerate(task.variants):
            members = []
            for prompt, target in episode_samples(variant.episode, tokenizer, rollout["window"]):
                key = (tuple(prompt), tuple(target))
                if key not in index:  # a turn the episodes share is one sample, counted once per episode
                    index[key] = len(samples)
                    samples.append((prompt, target))
                    weights.append(0.0)
                weights[index[key]] += 1.0
                members.append(index[key])
            episodes.append((t, v, members))
    longest = max(len(target) for _, target in samples)
    if longest >= rollout["max_response_tokens"]:
        raise BenchError(f"a reference or decoy turn has {longest} tokens, over rollout.max_response_tokens "
                         f"{rollout['max_response_tokens']}: the policy could never produce it")
    covered: list[float] = []
    reference: list[float] = []
    checks: list[float] = []

    def converged(nll: list[float]) -> bool:
        probs = [(t, v, math.exp(-sum(nll[i] for i in members))) for t, v, members in episodes]
        covered[:] = [sum(p for t, _, p in probs if t == task) for task in range(len(chosen))]
        reference[:] = [p for _, v, p in probs if v == 0]
        checks.append(time.time())
        if len(checks) % 25 == 1:
            _info(f"seed {seed}: warm start step {len(checks)}: episodes' probability per task "
                  f"{[round(p, 3) for p in covered]}, the reference's {[round(p, 3) for p in reference]} "
                  f"({checks[-1] - started:.0f}s)")
        return min(covered) >= coverage

    model = model.to(torch.float32)
    losses = supervised_steps(model, tokenizer, samples, steps=max_steps, learning_rate=WARM_START["learning_rate"],
                              seed=seed, stop_when=converged, weights=weights)
    reached = min(covered) >= coverage  # stopped before that step's update
    path = out_dir / "warm_start"
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return {"model": str(path), "tasks": [f"{c.record.scenario}/{c.record.task_idx}" for c in chosen],
            "episodes": len(episodes), "samples": len(samples), "longest_turn_tokens": longest,
            "longest_prompt_tokens": max(len(p) for p, _ in samples), "steps": len(losses) - reached,
            "reached": reached, "coverage": [round(p, 4) for p in covered],
            "reference_prob": [round(p, 4) for p in reference],
            "expected_pass_rate": round(sum(reference) / len(reference), 4), "first_loss": round(losses[0], 4),
            "last_loss": round(losses[-1], 6), "wall_s": round(time.time() - started, 1)}


def trainable_tasks(store_root: Path) -> list[Any]:
    """Every task of the demo environments the job could train on (verifier usable, audit passed), in order."""
    from awm_rl.training import tasks as T

    env = TRAIN_CONFIG["environments"]
    store = ArtifactStore(store_root)
    entries, _ = T.read_catalog(store)
    scenarios = T.select_environments(entries, env["scenarios"], None)
    excluded = T.audit_exclusions(store, scenarios, env["verifier_audit"], entries)
    return T.training_tasks(store, scenarios, judge_mode=TRAIN_CONFIG["judge"]["mode"], excluded=excluded)


# -- one seed ----------------------------------------------------------------------------------------
def train_config(store_root: Path, catalog: Path, out_dir: Path, model_path: str, seed: int, steps: int) -> Any:
    from awm_rl.training.config import config_from_dict

    data = copy.deepcopy(TRAIN_CONFIG)
    data["model"] = {"path": model_path}
    data["output_dir"] = str(out_dir / "grpo")
    data["environments"]["store_root"] = str(store_root)
    data["environments"]["catalog"] = str(catalog)
    data["grpo"].update(steps=steps, seed=seed)
    return config_from_dict(data, source="benchmarks/learn.py")


def run_seed(store_root: Path, catalog: Path, out_dir: Path, seed: int, steps: int, warm_steps: int, chosen: list[Any],
             listings: list[str]) -> dict[str, Any]:
    from awm_rl.training.job import run_training

    started = time.time()
    warm = warm_start(out_dir, seed, chosen, listings, warm_steps, WARM_START["coverage"])
    _info(f"seed {seed}: warm start {warm['steps']} steps, loss {warm['first_loss']} -> {warm['last_loss']}, "
          f"episodes' probability per task {warm['coverage']}, the reference's {warm['reference_prob']} "
          f"in {warm['wall_s']}s")

    def on_event(event: dict[str, Any]) -> None:
        if str(event.get("message", "")).startswith("step "):
            _info(f"seed {seed}: {event['message']}")

    summary = run_training(train_config(store_root, catalog, out_dir, warm["model"], seed, steps), on_event=on_event)
    records = [json.loads(line) for line in Path(summary["metrics_file"]).read_text(encoding="utf-8").splitlines()]
    result = curve_result([r["completion_rate"] for r in records])
    result.update({"seed": seed, "reward_mean": [r["reward_mean"] for r in records],
                   "format_error_ratio": [r["format_error_ratio"] for r in records],
                   "groups_without_variance": [r["frac_reward_zero_std"] for r in records],
                   "updates_skipped": [r.get("updates_skipped", 0) for r in records],
                   "warm_start": warm, "weights": summary["weights"], "time_split": summary["time_split"],
                   "run_dir": summary["output_dir"], "wall_s": round(time.time() - started, 1)})
    return result


def curve_result(pass_rate: list[float]) -> dict[str, Any]:
    """Steps, the pass rate per step, the means of the first and last WINDOW steps and whether it rose enough."""
    n = min(WINDOW, len(pass_rate))
    first = sum(pass_rate[:n]) / n if n else 0.0
    last = sum(pass_rate[-n:]) / n if n else 0.0
    return {"steps": len(pass_rate), "pass_rate": [round(p, 4) for p in pass_rate], "first": round(first, 4),
            "last": round(last, 4), "rise": round(last - first, 4), "learned": last - first >= MIN_RISE}


# -- the curve -------------------------------------------------------------------------------------
def ascii_plot(curves: dict[str, list[float]], height: int = 10) -> str:
    """Pass rate (0..1, rows) per step (columns), one marker per seed."""
    marks = "*o+x#@"
    width = max((len(v) for v in curves.values()), default=0)
    grid = [[" "] * (3 * width) for _ in range(height + 1)]
    for i, values in enumerate(curves.values()):
        for step, value in enumerate(values):
            row = height - round(value * height)
            grid[row][3 * step + 1] = marks[i % len(marks)] if grid[row][3 * step + 1] == " " else "&"
    lines = [f"{(height - r) / height:4.1f} |" + "".join(row) for r, row in enumerate(grid)]
    lines.append("     +" + "-" * (3 * width))
    lines.append("      " + "".join(f"{s + 1:^3d}" for s in range(width)) + "  step")
    legend = ", ".join(f"{marks[i % len(marks)]} {name}" for i, name in enumerate(curves))
    return "\n".join(lines + [f"      pass rate per GRPO step ({legend}; & = several)"])


def plot_png(curves: dict[str, list[float]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=100)
    for name, values in curves.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("pass rate (verifier: completed)")
    ax.set_title("awm bench learn: tiny Qwen3 on the demo tasks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# -- entry point ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="awm bench learn", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="model/GRPO seeds, one run each (default: 0)")
    p.add_argument("--steps", type=int, default=TRAIN_CONFIG["grpo"]["steps"], help="GRPO steps per run (>= 10)")
    p.add_argument("--warm-steps", type=int, default=WARM_START["max_steps"], help="at most this many warm-start steps")
    p.add_argument("--store", type=Path, default=None, help="a store with the demo batch synthesized (default: "
                   "$AWM_HOME when its catalog has the demo environments, else the demo is synthesized into --output)")
    p.add_argument("--output", type=Path, default=None, help="where runs and the curve go (default: a new temp folder)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps must be at least 2")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    started, load_start = time.time(), os.getloadavg()
    out = (args.output or Path(tempfile.mkdtemp(prefix="awm-bench-learn-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:  # progress and whatever Ray's workers print go to stderr: stdout carries only the report
        with contextlib.redirect_stdout(sys.stderr):
            store_root, synth_s = _store(args.store, out)
            chosen, listings, decoys = choose_tasks(store_root, out)
            _info(f"tasks {decoys['tasks']}, {DECOYS} decoys each confirmed failing by the verifier, in "
                  f"{decoys['wall_s']}s: " + "; ".join(f"{d['argument']} {d['reference']!r} -> {d['decoy']!r}"
                                                        for c in chosen for d in c.report()["decoys"]))
            catalog = bench_catalog(store_root, chosen, out / "catalog.json")
            runs = [run_seed(store_root, catalog, out / f"seed{seed}", seed, args.steps, args.warm_steps, chosen,
                             listings) for seed in args.seeds]
    except BenchError as exc:
        print(f"awm bench learn: {exc}", file=sys.stderr)
        return 2
    curves = {f"seed {r['seed']}": r["pass_rate"] for r in runs}
    plot = ascii_plot(curves)
    (out / "pass_rate.txt").write_text(plot + "\n", encoding="utf-8")
    report = {**{k: runs[0][k] for k in ("steps", "pass_rate", "first", "last", "rise", "learned")},
              "all_learned": all(r["learned"] for r in runs), "min_rise": MIN_RISE, "window": WINDOW,
              "runs": runs, "store": str(store_root), "demo_synthesis_s": synth_s,
              "warm_start": ("supervised, to convergence, on each task's reference solution replayed through the "
                             f"loop and pool plus {DECOYS} decoy episodes: the reference with one argument value "
                             "changed (another enum value, a value earlier tool results show for that key, or a "
                             "neighbouring integer), each replayed and confirmed failing by the task's verifier"),
              "decoys": decoys,
              "config": {"tokenizer": TOKENIZER, "warm_start": {**WARM_START, "max_steps": args.warm_steps},
                         "train": {**TRAIN_CONFIG, "grpo": {**TRAIN_CONFIG["grpo"], "steps": args.steps}}},
              "curve_png": str(plot_png(curves, out / "pass_rate.png")), "curve_ascii": str(out / "pass_rate.txt"),
              "reward": "format error -1, completed 1.0, partially completed 0.1, otherwise 0 (code-mode judge: "
                        "the task's verifier on the initial and final databases)",
              "wall_s": round(time.time() - started, 1), "cpu_s": _cpu_s(),
              "load_avg": {"start": [round(v, 1) for v in load_start], "end": [round(v, 1) for v in os.getloadavg()]}}
    atomic_write_json(out / "learn.json", report)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for r in runs:
            print(f"seed {r['seed']}: pass rate {r['pass_rate']}; first {WINDOW} {r['first']:.3f}, last {WINDOW} "
                  f"{r['last']:.3f}, rise {r['rise']:+.3f} ({'learned' if r['learned'] else 'NOT learned'})")
        print(plot)
        print(f"curve: {report['curve_png']}; report: {out / 'learn.json'}; {report['wall_s']:.0f}s")
    return 0 if report["all_learned"] else 1


def _cpu_s() -> float:
    """CPU seconds of this process (generation, training, judging threads): on a shared machine a steadier
    measure of the work than wall time."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 1)


def _store(given: Path | None, out: Path) -> tuple[Path, float | None]:
    """The store to train on, and the seconds spent synthesizing the demo into it (None: it was there)."""
    if given is not None:
        if not demo_ready(given):
            raise BenchError(f"{given}/catalog.json does not list the demo environments {DEMO_SCENARIOS} as ready: "
                             f"run `awm synth --seed-batch {DEMO_BATCH}` with AWM_HOME={given}, or leave out --store")
        return given.resolve(), None
    from awm_resources.store import default_home

    home = default_home()
    if demo_ready(home):
        return home, None
    root = out / "demo_store"
    _info(f"the demo environments are not in {home}: synthesizing seeds/demo.jsonl into {root} (offline replay)")
    return root, round(synthesize_demo(root), 1)
