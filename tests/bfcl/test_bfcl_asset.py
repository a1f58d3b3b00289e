"""The `bfcl_evaluation` asset materializes in-process, per category, with the project's resources."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from awm_assets.defs.bfcl.bfcl_asset import bfcl_category_partitions, bfcl_evaluation
from awm_assets.defs.shared.resources import StoreResource


def _run(root: Path, category: str, config: dict) -> dg.ExecuteInProcessResult:
    return dg.materialize([bfcl_evaluation], partition_key=category, instance=dg.DagsterInstance.ephemeral(),
                          resources={"store": StoreResource(root=str(root))},
                          run_config={"ops": {"bfcl_evaluation": {"config": config}}})


def test_asset_materializes_one_category_with_table_plot_and_trajectories(tmp_path):
    from awm_rl.bfcl import ALL_CATEGORIES

    assert bfcl_category_partitions.get_partition_keys() == [*ALL_CATEGORIES, "all"]
    result = _run(tmp_path, "multi_turn_miss_func", {"policy": "ground_truth", "limit": 4})
    assert result.success
    [mat] = result.asset_materializations_for_node("bfcl_evaluation")
    meta = mat.metadata
    assert mat.partition == "multi_turn_miss_func"
    assert meta["accuracy"].value == 1.0 and meta["cases"].value == 4 and meta["policy"].text == "ground_truth"
    table = meta["results"].md_str
    assert "| ground_truth | this run: multi_turn_miss_func, 4 case(s) | 100.00 |" in table
    for figure in ("54.92", "64.50", "53.83", "65.94", "61.25", "70.18"):
        assert figure in table
    plot = Path(meta["plot"].path)
    assert plot.suffix == ".png" and plot.stat().st_size > 1000 and "base64" not in json.dumps(str(meta))
    cases = sorted(Path(meta["trajectories"].path).glob("*.json"))
    assert [c.stem for c in cases] == [f"multi_turn_miss_func_{i}" for i in range(4)]
    assert Path(meta["trajectories"].path).is_relative_to(tmp_path / "bfcl" / "multi_turn_miss_func")


def test_asset_evaluates_the_latest_trained_model_and_fails_clearly_without_one(tmp_path):
    result = dg.materialize([bfcl_evaluation], partition_key="multi_turn_base", raise_on_error=False,
                            resources={"store": StoreResource(root=str(tmp_path))},
                            run_config={"ops": {"bfcl_evaluation": {"config": {"policy": "grpo_latest", "limit": 1}}}})
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert "no trained model" in failure.step_failure_data.error.message
    # A trained model as GRPO training leaves it (here: the tiny model saved as `final/`).
    from awm_rl.agent.tiny_model import build_tiny_qwen3

    run = tmp_path / "training" / "tiny" / "run1"
    model, tokenizer = build_tiny_qwen3(tmp_path / "models")
    model.save_pretrained(str(run / "final"))
    tokenizer.save_pretrained(str(run / "final"))
    (run / "summary.json").write_text(json.dumps({"final_model": str(run / "final")}))
    result = _run(tmp_path, "multi_turn_base", {"policy": "grpo_latest", "limit": 1, "max_new_tokens": 32,
                                                "max_steps_per_turn": 1})
    assert result.success
    [mat] = result.asset_materializations_for_node("bfcl_evaluation")
    assert mat.metadata["policy"].text == f"transformers:{run / 'final'}" and mat.metadata["cases"].value == 1
