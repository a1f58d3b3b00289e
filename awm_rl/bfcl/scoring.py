"""Score one conversation with BFCL's own multi-turn checker.

The model's result is what BFCL's harness would have produced: per user turn, per step, the list
of execution strings the model's calls decode to (steps without a call, e.g. list_tools or a final
answer, decode to nothing and are left out, as BFCL's evaluator drops empty decodes). Before the
checker BFCL's evaluator fails an entry whose number of turns differs from the possible answer's
(`multi_turn:force_terminated`, in `_evaluate_single_multi_turn_entry`); that module imports every
provider SDK, so that one length test is restated here with BFCL's error type and message. The
verdict itself is `multi_turn_checker(...)`: state checks of every backend instance and response
checks of the execution results after each turn, against the possible answer executed afresh.
"""

from __future__ import annotations

from typing import Any

from awm_rl.bfcl.data import BFCLCase
from awm_rl.bfcl.environment import drop_instances


def score_case(case: BFCLCase, model_result: list[list[list[str]]], *, model_name: str) -> dict[str, Any]:
    """BFCL's verdict `{"valid": bool, ...}` on the decoded per-turn calls of one case."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    ground_truth = case.ground_truth
    if len(model_result) != len(ground_truth):
        return {
            "valid": False,
            "error_message": [f"Model was force-terminated during inference phase. The length of the model result "
                              f"turns ({len(model_result)}) does not match the length of the ground truth turns "
                              f"({len(ground_truth)})."],
            "error_type": "multi_turn:force_terminated",
        }
    decoded = [[step for step in turn if step] for turn in model_result]
    entry = {k: v for k, v in case.entry.items() if k != "function"}
    try:
        return multi_turn_checker(decoded, ground_truth, entry, case.category, model_name)
    finally:
        # The checker executes both sides in BFCL's module namespace under these names.
        drop_instances(f"{model_name}_eval", case.id)
        drop_instances(f"{model_name}_ground_truth_eval", case.id)
