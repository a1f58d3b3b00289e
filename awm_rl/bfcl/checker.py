"""The subprocess/JSON boundary to BFCL's single-turn checker and leaderboard aggregation.

bfcl-eval's AST checker and `generate_leaderboard_csv` import its model table, which imports every
provider SDK it declares (anthropic, cohere, mistralai, qwen-agent, ...; numpy 1.26 pinned): they
cannot be installed beside this stack. `make bfcl-venv` builds a second virtual environment with
bfcl-eval and exactly its own dependencies; `bfcl_worker.py` runs there and this module talks to it
with one JSON request per evaluation (see the worker's docstring for the format).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from awm_rl.bfcl.data import BFCLUnavailable

WORKER = Path(__file__).with_name("bfcl_worker.py")
AGENTIC_WEIGHT = 0.4  # bfcl-eval 2026.3.23's generate_leaderboard_csv: [10, 10, 10, 30, 40]
MODEL_NAME = "awm-policy"  # BFCL's registry name for our policy (no "_": BFCL reads "_" as "/")


def bfcl_python() -> Path:
    """The BFCL environment's interpreter: $AWM_BFCL_PYTHON, else .venv/bfcl next to this interpreter's venv."""
    from awm_resources.settings import load_settings

    configured = load_settings().evaluation.bfcl_python
    if configured:
        return configured
    return Path(sys.prefix) / "bfcl" / "bin" / "python"


def run_worker(request: dict[str, Any], *, timeout: float = 3600) -> dict[str, Any]:
    """One request to BFCL's own checker and aggregation; a clear error when its environment is missing."""
    python = bfcl_python()
    if not python.is_file():
        raise BFCLUnavailable(f"BFCL's scoring environment is missing ({python}): run `make bfcl-venv` (part of "
                              "`make install`) or set AWM_BFCL_PYTHON to a Python with bfcl-eval and its dependencies")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("BFCL_PROJECT_ROOT", str(Path(request["score_dir"]).parent))
    try:
        # -I: the worker's folder (this package's modules: data.py, runner.py, ...) stays off its sys.path.
        proc = subprocess.run([str(python), "-I", str(WORKER)], input=json.dumps(request), capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BFCLUnavailable(f"BFCL's checker did not answer within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise BFCLUnavailable(f"BFCL's checker ({python} {WORKER.name}) failed with exit code {proc.returncode}: "
                              f"{proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def score_and_aggregate(single_turn: dict[str, list[dict[str, Any]]], scores: dict[str, dict[str, Any]], *,
                        display_name: str, score_dir: Path) -> dict[str, Any]:
    """BFCL's verdicts on the single-turn results and its leaderboard rows over every category given."""
    return run_worker({"model_name": MODEL_NAME, "display_name": display_name, "score_dir": str(score_dir),
                       "single_turn": single_turn, "scores": scores})


def overall_figures(leaderboard: dict[str, dict[str, str]]) -> dict[str, Any]:
    """BFCL's summary figures (fractions) from its data_overall.csv row of our policy."""
    row = leaderboard.get("data_overall") or {}

    def number(key: str) -> float | None:
        value = row.get(key)
        try:
            return round(float(str(value).rstrip("%")) / (100 if str(value).endswith("%") else 1), 6)
        except (TypeError, ValueError):
            return None

    overall = number("Overall Acc")
    return {"overall": overall,
            # BFCL v4 weighs non-live, live, irrelevance, multi-turn and agentic 10/10/10/30/40 and counts
            # a category not run as 0; the agentic ones (web search, memory) need live services, so this
            # is BFCL's figure over the other 60% of the weight (the scope of BFCL v3's categories).
            "overall_without_agentic": None if overall is None else round(overall / (1 - AGENTIC_WEIGHT), 6), "non_live": number("Non-Live AST Acc"), "live": number("Live Acc"),
            "multi_turn": number("Multi Turn Acc"), "relevance": number("Relevance Detection"),
            "irrelevance": number("Irrelevance Detection"), "agentic_web_search": number("Web Search Summary"),
            "agentic_memory": number("Memory Summary")}
