"""BFCL's own single-turn scoring and leaderboard aggregation, run in bfcl-eval's own environment.

This file runs as a script under the Python of the second virtual environment (`make bfcl-venv`:
bfcl-eval with its declared dependencies, which clash with the main stack) and imports nothing but
the standard library and bfcl_eval. One JSON request on stdin, one JSON answer on stdout:

    {"model_name", "display_name", "score_dir",
     "single_turn": {category: [{"id", "result"}, ...]},   # BFCL's FC result entries
     "scores": {category: {"accuracy", "total_count"}}}    # categories scored elsewhere (multi-turn)
 -> {"bfcl_eval_version", "categories": {category: {"accuracy", "correct_count", "total_count",
     "failures": {id: {"error_type", "error"}}}}, "leaderboard": {csv name: our row}}

Each single-turn category goes through BFCL's `evaluate_task` (its AST checker or relevance check,
with the entries subset to the ids given); the overall comes from BFCL's `generate_leaderboard_csv`.
Our policy is registered in BFCL's model table the way BFCL adds a model: a function-calling model
decoded by BFCL's OpenAI FC handler (results are `[{name: json-arguments}]`; nothing is sent anywhere).
"""

import contextlib
import csv
import json
import os
import sys
from importlib.metadata import version
from pathlib import Path


def _register(model_name: str, display_name: str) -> None:
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    MODEL_CONFIG_MAPPING[model_name] = ModelConfig(
        model_name=model_name, display_name=display_name, url="https://github.com/Snowflake-Labs/agent-world-model",
        org="AWM (this project)", license="N/A", model_handler=OpenAICompletionsHandler, is_fc_model=True,
        underscore_to_dot=False)


def _failures(score_file: Path) -> dict:
    rows = json.loads("[" + ",".join(line for line in score_file.read_text(encoding="utf-8").splitlines() if line) + "]")
    return {str(r["id"]): {"error_type": r.get("error_type"), "error": r.get("error")} for r in rows[1:]}


def _rows(score_dir: Path, display_name: str) -> dict:
    out = {}
    for path in sorted(score_dir.glob("data_*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                if display_name in row.values():
                    out[path.stem] = row
    return out


def run(request: dict) -> dict:
    from bfcl_eval.eval_checker.eval_runner import evaluate_task, get_handler
    from bfcl_eval.eval_checker.eval_runner_helper import generate_leaderboard_csv, record_result
    from bfcl_eval.utils import get_directory_structure_by_category

    model_name, display_name = request["model_name"], request["display_name"]
    score_dir = Path(request["score_dir"])
    _register(model_name, display_name)
    handler = get_handler(model_name)
    table: dict = {}
    categories = {}
    for category, results in request.get("single_turn", {}).items():
        table = evaluate_task(category, None, score_dir, results, model_name, handler, table, allow_missing=True)
        score_file = score_dir / model_name / get_directory_structure_by_category(category) / \
            f"BFCL_v4_{category}_score.json"
        categories[category] = {**table[model_name][category], "failures": _failures(score_file)}
    for category, score in request.get("scores", {}).items():
        record_result(table, model_name, category, score["accuracy"], score["total_count"])
    generate_leaderboard_csv(table, score_dir)
    for score in categories.values():
        score["correct_count"] = round(score["accuracy"] * score["total_count"])
        score.pop("display_accuracy", None)
    return {"bfcl_eval_version": version("bfcl-eval"), "categories": categories,
            "leaderboard": _rows(score_dir, display_name)}


def main() -> int:
    request = json.loads(sys.stdin.read())
    Path(request["score_dir"]).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OPENAI_API_KEY", "unused: BFCL's FC handler only decodes here")
    with contextlib.redirect_stdout(sys.stderr):  # BFCL prints progress; stdout carries the answer only
        answer = run(request)
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
