"""BFCL (Berkeley Function-Calling Leaderboard) evaluation through our agent loop.

BFCL's own data, executable backends and multi-turn checker come from the installed `bfcl-eval`
package; this package only adapts them: `BFCLEnvironment` makes a test case's backends an
environment of `awm_rl.agent.loop`, `ground_truth_policy` replays the possible answers, and
`evaluate_bfcl` runs a policy over a category and scores every case with BFCL's checker.
"""

from awm_rl.bfcl.data import MULTI_TURN_CATEGORIES, PAPER_TABLE4, BFCLCase, BFCLUnavailable, load_cases
from awm_rl.bfcl.environment import BFCLEnvironment
from awm_rl.bfcl.ground_truth import ground_truth_policy
from awm_rl.bfcl.runner import BFCLPolicyError, BFCLReport, build_policy, evaluate_bfcl
from awm_rl.bfcl.scoring import score_case

__all__ = ["BFCLCase", "BFCLEnvironment", "BFCLPolicyError", "BFCLReport", "BFCLUnavailable", "MULTI_TURN_CATEGORIES",
           "PAPER_TABLE4", "build_policy", "evaluate_bfcl", "ground_truth_policy", "load_cases", "score_case"]
