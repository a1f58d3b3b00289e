"""`awm eval bfcl` end to end, offline, on bfcl-eval's own data, backends and checker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import PROJECT_ROOT


def _awm(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AWM_HOME": str(home), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("BFCL_PROJECT_ROOT", None)
    return subprocess.run([sys.executable, "-m", "awm_assets.cli", *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_ground_truth_scores_at_least_95_percent_on_multi_turn_base(tmp_path):
    out = tmp_path / "run"
    proc = _awm(["eval", "bfcl", "--category", "multi_turn_base", "--policy", "ground_truth", "--limit", "50",
                 "--json", "--out", str(out)], tmp_path / "home")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # stdout holds only the JSON answer
    assert {"category", "policy", "cases", "accuracy", "per_case"} <= set(doc)
    assert (doc["category"], doc["policy"], doc["cases"]) == ("multi_turn_base", "ground_truth", 50)
    assert doc["accuracy"] >= 0.95, [c for c in doc["per_case"] if not c["valid"]]
    assert len(doc["per_case"]) == 50 and [c["id"] for c in doc["per_case"]][:2] == ["multi_turn_base_0", "multi_turn_base_1"]
    first = doc["per_case"][0]
    assert first["valid"] and first["user_turns_reached"] == first["user_turns"] == 4 and first["calls"] >= 4
    # The trajectory of a case: our loop's conversation, the calls BFCL decoded and scored, the backends' state.
    case = json.loads(Path(first["trajectory"]).read_text())
    assert case["valid"] and case["model_result_decoded"][0] == [["cd(folder='document')"], ["mkdir(dir_name='temp')"],
                                                                 ["mv(source='final_report.pdf',destination='temp')"]]
    roles = [m["role"] for m in case["episode"]["messages"]]
    assert roles[:4] == ["system", "user", "assistant", "tool"] and roles.count("user") == 4
    assert "GorillaFileSystem" in case["final_state"]
    assert (out / "report.json").is_file() and (out / "accuracy.png").stat().st_size > 1000


def test_bad_category_and_policy_are_clear_errors(tmp_path):
    proc = _awm(["eval", "bfcl", "--category", "simple_pyhton", "--json"], tmp_path)
    assert proc.returncode == 2 and "unsupported BFCL category 'simple_pyhton'" in proc.stderr and not proc.stdout
    proc = _awm(["eval", "bfcl", "--category", "multi_turn_base", "--policy", "reference", "--limit", "1"], tmp_path)
    assert proc.returncode == 2 and "use ground_truth" in proc.stderr
    proc = _awm(["eval", "bfcl", "--category", "multi_turn_base", "--policy", "grpo_latest", "--limit", "1"], tmp_path)
    assert proc.returncode == 2 and "no trained model" in proc.stderr
    try:
        import vllm  # noqa: F401 - only whether it imports
    except ImportError:  # the vLLM path is guarded: a clear message on a machine without vllm
        proc = _awm(["eval", "bfcl", "--category", "multi_turn_base", "--policy", "vllm:/models/x", "--limit", "1"], tmp_path)
        assert proc.returncode == 2 and "needs the 'vllm' package" in proc.stderr
