"""BFCL (Berkeley Function-Calling Leaderboard) evaluation through our agent loop.

BFCL's own data, executable backends and checkers come from `bfcl-eval`; this package only adapts
them: `BFCLEnvironment` makes a multi-turn case's backends an environment of `awm_rl.agent.loop`,
`SingleTurnEnvironment` records a single-turn case's calls, `ground_truth_policy` replays the
possible answers, and `evaluate_suite` runs a policy over categories, scores every case with BFCL's
checkers and gets BFCL's overall from its own leaderboard code (in bfcl-eval's own environment,
`checker.py`).
"""

from awm_rl.bfcl.data import (
    ALL_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    PAPER_TABLE4,
    SINGLE_TURN_CATEGORIES,
    BFCLCase,
    BFCLUnavailable,
    expand_categories,
    load_cases,
)
from awm_rl.bfcl.environment import BFCLEnvironment
from awm_rl.bfcl.ground_truth import ground_truth_policy
from awm_rl.bfcl.runner import BFCLPolicyError, BFCLReport, BFCLSuite, build_policy, evaluate_bfcl, evaluate_suite
from awm_rl.bfcl.scoring import score_case
from awm_rl.bfcl.single_turn import SingleTurnEnvironment

__all__ = ["ALL_CATEGORIES", "BFCLCase", "BFCLEnvironment", "BFCLPolicyError", "BFCLReport", "BFCLSuite",
           "BFCLUnavailable", "MULTI_TURN_CATEGORIES", "PAPER_TABLE4", "SINGLE_TURN_CATEGORIES", "SingleTurnEnvironment",
           "build_policy", "evaluate_bfcl", "evaluate_suite", "expand_categories", "ground_truth_policy", "load_cases",
           "score_case"]
