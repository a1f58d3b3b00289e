"""BFCL accuracy over training steps: every saved checkpoint of a GRPO run evaluated on BFCL categories.

Run after (or beside) training on the checkpoints it wrote (`checkpoint-N/` with the model and its
tokenizer), so the curve costs nothing while the trainer holds the accelerator; the same harness and
BFCL's own checker as `awm eval bfcl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from awm_rl.bfcl.runner import evaluate_bfcl


def checkpoints_by_step(records: list[dict[str, Any]]) -> list[tuple[int, Path]]:
    """(RL step, checkpoint folder) for every step record that saved one that exists."""
    out = []
    for r in records:
        path = r.get("checkpoint")
        if path and Path(path).is_dir():
            out.append((int(r["step"]), Path(path)))
    return out


def evaluate_checkpoints(checkpoints: list[tuple[int, Path]], categories: list[str], *, out_dir: Path,
                         limit: int | None = 5, concurrency: int = 4, **policy_kwargs: Any) -> list[dict[str, Any]]:
    """One row per (step, category): accuracy and cases; trajectories under out_dir/step_N/<category>/."""
    rows = []
    for step, path in checkpoints:
        for category in categories:
            report = evaluate_bfcl(category, f"transformers:{path}", out_dir=Path(out_dir) / f"step_{step:04d}" / category,
                                   limit=limit, concurrency=concurrency, **policy_kwargs)
            rows.append({"step": step, "category": category, "accuracy": report.accuracy, "cases": report.cases,
                         "checkpoint": str(path)})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "bfcl_over_steps.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return rows


def plot_over_steps(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Accuracy per category (lines) against the RL step."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for category in sorted({r["category"] for r in rows}):
        points = sorted((r["step"], 100 * r["accuracy"]) for r in rows if r["category"] == category)
        ax.plot([s for s, _ in points], [a for _, a in points], marker="o", label=category)
    ax.set_xlabel("RL step")
    ax.set_ylabel("BFCL accuracy (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
