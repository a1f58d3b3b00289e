"""What an evaluated policy fails at, with evidence: the input of synthesis aimed at it (`awm evolve`).

`analyze()` reads an evaluation's output folder (`episodes/*.json`: trajectory and score, `report.json`) and
the store, and groups every episode four ways:

- scenario category (`scenario.json`);
- task kind: `read` (no write), `write` (one call that writes), `chain` (two or more calls, one of them a
  write: find something, then act on it), from the task's reference solution and the tools' HTTP methods,
  else from the task's wording (`kind_source` in the examples says which);
- tool kind: `read` (GET), `create` (POST), `update` (PUT/PATCH), `delete` (DELETE), from `api_spec.json`
  (a POST named like an update or a delete counts as one); an episode counts under every kind its task
  needs (reference solution), else every kind it called;
- failure mode of each failed episode (`failure_mode()`): `format_rule` (broke a rule of the tool-call
  protocol, awm_rl.agent.validator; the rule is in the detail), `environment_error`, `policy_error` (the
  policy produced no turn), `wrong_tool` (called tools the reference solution does not use while missing
  ones it does), `bad_arguments` (a tool answered a client error, or the needed tools were called and the
  judge still found the result wrong: wrong values), `gave_up` (ran out of turns, or answered without
  calling what the task needs).

A failure is any outcome but `completed` (a partial completion is a failure here). The weaknesses are
the groups whose fail rate is highest (at least `min_failed` failures), the failure modes by their share of
all episodes. Written as a `WeaknessReport` (awm_resources.documents) with a plot.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from awm_resources.documents import WEAKNESSES_DIR, WeaknessGroup, WeaknessReport, dump
from awm_resources.store import ArtifactStore, atomic_write_json
from awm_rl.agent.episode import Episode, EpisodeScore

DIMENSIONS = ("category", "task_kind", "tool_kind", "failure_mode")
TASK_KINDS = ("read", "write", "chain")
TOOL_KINDS = ("read", "create", "update", "delete")
FAILURE_MODES = ("format_rule", "wrong_tool", "bad_arguments", "gave_up", "environment_error", "policy_error")
EXAMPLES_PER_GROUP = 5

_UPDATE_NAME = re.compile(r"^(update|edit|set|change|mark|move|assign|rename|close|reopen|archive|complete|cancel|"
                          r"approve|reject|toggle|enable|disable|pin|unpin|star|follow|unfollow|add_.+_to|remove_.+_from)", re.I)
_DELETE_NAME = re.compile(r"^(delete|remove|destroy|purge|clear)", re.I)
_WRITE_WORDS = re.compile(r"\b(create|add|make|open|post|book|reserve|schedule|submit|send|invite|update|change|edit|set|"
                          r"rename|move|mark|assign|close|reopen|archive|cancel|delete|remove|follow|unfollow|save|"
                          r"reschedule|approve|reject|upload|register)\b", re.I)
_CHAIN_WORDS = re.compile(r"\b(then|after that|and (?:then )?(?:create|add|update|change|mark|move|assign|close|"
                          r"cancel|delete|remove|book|reschedule|set))\b|\b(find|look up|locate|whichever|the oldest|"
                          r"the newest|the latest|the cheapest|the highest|the lowest)\b.*\b(and|then)\b", re.I)


# ----------------------------------------------------------------------------------------- kinds
def tool_kinds(api_spec: dict[str, Any]) -> dict[str, str]:
    """operation_id -> read | create | update | delete, from the spec's HTTP methods (POST refined by name)."""
    out = {}
    for group in api_spec.get("api_groups", []):
        for ep in group.get("endpoints", []):
            name, method = ep.get("operation_id"), str(ep.get("method", "")).upper()
            if not name:
                continue
            out[name] = tool_kind(name, method)
    return out


def tool_kind(name: str, method: str | None = None) -> str:
    method = (method or "").upper()
    if method == "GET":
        return "read"
    if method == "DELETE" or _DELETE_NAME.match(name):
        return "delete"
    if method in ("PUT", "PATCH") or _UPDATE_NAME.match(name):
        return "update"
    if method == "POST":
        return "create"
    return "read" if re.match(r"^(get|list|search|find|count|show|view|check)", name, re.I) else "update"


def task_kind(calls: list[str] | None, kinds: dict[str, str], task: str) -> tuple[str, str]:
    """(read | write | chain, source): from the reference solution's calls, else from the task's words."""
    if calls:
        writes = [c for c in calls if kinds.get(c, tool_kind(c)) != "read"]
        kind = "read" if not writes else "write" if len(calls) == 1 else "chain"
        return kind, "reference_solution"
    if not _WRITE_WORDS.search(task):
        return "read", "task_text"
    return ("chain" if _CHAIN_WORDS.search(task) else "write"), "task_text"


# ----------------------------------------------------------------------------------------- failure modes
def _calls(episode: Episode) -> list[tuple[str, Any]]:
    return [(s.format.get("tool_name") or "", s.tool) for s in episode.steps
            if s.format.get("action") == "call_tool" and s.tool is not None]


def failure_mode(episode: Episode, score: EpisodeScore, needed: set[str] | None = None) -> tuple[str, str] | None:
    """(mode, detail) of a failed episode, None for a completed one; `needed`: the reference solution's tools."""
    if score.outcome == "completed":
        return None
    if score.outcome == "format_error":
        rule, detail = episode.format_rule or "?", episode.termination_detail or score.reasons
        return "format_rule", (detail if rule in detail else f"{rule}: {detail}")[:300]
    if score.outcome == "environment_error" or episode.termination == "environment_error":
        return "environment_error", (episode.termination_detail or score.reasons)[:300]
    if episode.termination == "policy_error":
        return "policy_error", (episode.termination_detail or score.reasons)[:300]
    calls = _calls(episode)
    called = {name for name, _ in calls}
    if needed and (needed - called) and (called - needed):
        return "wrong_tool", f"called {sorted(called - needed)} but never {sorted(needed - called)}"
    client_errors = [(name, tool) for name, tool in calls if not tool.ok and tool.status and 400 <= tool.status < 500]
    if client_errors:
        name, tool = client_errors[0]
        return "bad_arguments", f"{name} answered {tool.status}: {tool.text[:200]}"
    if episode.termination == "max_turns":
        return "gave_up", f"ran out of turns ({episode.max_turns}) after {len(calls)} tool calls"
    if not calls or (needed and needed - called):
        missing = f"; never called {sorted(needed - called)}" if needed and needed - called else ""
        return "gave_up", f"answered after {len(calls)} tool calls{missing}"
    return "bad_arguments", f"called the tools the task needs, judged {score.outcome}: {score.reasons[:200]}"


# ----------------------------------------------------------------------------------------- analysis
def read_episodes(evaluation_dir: Path) -> list[tuple[Path, Episode, EpisodeScore]]:
    """Every stored episode of an evaluation run; a file that is not one is an error naming it."""
    folder = Path(evaluation_dir) / "episodes"
    if not folder.is_dir():
        raise FileNotFoundError(f"{evaluation_dir} has no episodes/ folder: not an evaluation run's output")
    out = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            out.append((path, Episode.model_validate(data["episode"]), EpisodeScore.model_validate(data["score"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is not an evaluation episode ({{'episode', 'score'}}): {exc}") from None
    return out


class _ScenarioFacts:
    """Per scenario: category, tool kinds and reference-solution calls per task (read once)."""

    def __init__(self, store: ArtifactStore):
        self.store = store
        self._cache: dict[str, tuple[str, dict[str, str], dict[int, list[str]]]] = {}

    def get(self, scenario: str) -> tuple[str, dict[str, str], dict[int, list[str]]]:
        if scenario not in self._cache:
            from awm_rl.quality.solutions import load_solutions
            from awm_rl.reward import load_tasks

            category = "other"
            if self.store.has(scenario, "scenario.json"):
                category = self.store.scenario(scenario).category or "other"
            kinds = tool_kinds(self.store.read_json(scenario, "api_spec.json")) if self.store.has(scenario, "api_spec.json") else {}
            solutions: dict[int, list[str]] = {}
            try:
                entries = [v for r in load_tasks(self.store, scenario) for v in r.verifiers]
                solutions = {i: [c.tool for c in s.calls] for i, s in load_solutions(self.store.scenario_dir(scenario), entries).items()}
            except FileNotFoundError:
                pass
            self._cache[scenario] = (category, kinds, solutions)
        return self._cache[scenario]


def analyze(store: ArtifactStore, evaluation_dir: Path, *, top: int = 6, min_failed: int = 1) -> WeaknessReport:
    """Group the evaluation's episodes (see the module docstring); the `top` weakest groups first."""
    evaluation_dir = Path(evaluation_dir)
    episodes = read_episodes(evaluation_dir)
    if not episodes:
        raise ValueError(f"{evaluation_dir}/episodes holds no episode: nothing to analyze")
    report_path = evaluation_dir / "report.json"
    policy = json.loads(report_path.read_text(encoding="utf-8")).get("policy") if report_path.is_file() else episodes[0][1].policy
    facts = _ScenarioFacts(store)
    members: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    failed_total = 0
    for path, ep, score in episodes:
        category, kinds, solutions = facts.get(ep.scenario)
        ref = solutions.get(ep.task_idx)
        tkind, source = task_kind(ref, kinds, ep.task)
        needed = set(ref) if ref else None
        mode = failure_mode(ep, score, needed)
        item = {"scenario": ep.scenario, "task_idx": ep.task_idx, "task": ep.task, "outcome": score.outcome,
                "mode": mode[0] if mode else None, "detail": mode[1] if mode else None, "episode": str(path),
                "kind_source": source}
        failed_total += mode is not None
        members[("category", category)].append(item)
        members[("task_kind", tkind)].append(item)
        used = {kinds.get(t, tool_kind(t)) for t in (needed or {name for name, _ in _calls(ep)})}
        for k in sorted(used):
            members[("tool_kind", k)].append(item)
    groups = [_group(dim, key, items) for (dim, key), items in members.items()]
    failed_items = [i for items in [members[k] for k in members if k[0] == "category"] for i in items if i["mode"]]
    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i in failed_items:
        by_mode[i["mode"]].append(i)
    for mode_name, items in by_mode.items():  # share of all episodes that failed this way
        g = _group("failure_mode", mode_name, items)
        g.episodes, g.fail_rate = len(episodes), round(len(items) / len(episodes), 4)
        groups.append(g)
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    groups.sort(key=lambda g: (order[g.dimension], -g.fail_rate, g.key))
    weak = sorted((g for g in groups if g.failed >= min_failed), key=lambda g: (-g.fail_rate, -g.failed, order[g.dimension], g.key))
    return WeaknessReport(evaluation=str(evaluation_dir), policy=policy, episodes=len(episodes), failed=failed_total,
                          groups=groups, weaknesses=weak[:top])


def _group(dimension: str, key: str, items: list[dict[str, Any]]) -> WeaknessGroup:
    failed = [i for i in items if i["mode"]]
    return WeaknessGroup(dimension=dimension, key=key, episodes=len(items), failed=len(failed),
                         fail_rate=round(len(failed) / len(items), 4) if items else 0.0,
                         modes=dict(Counter(i["mode"] for i in failed).most_common()),
                         examples=failed[:EXAMPLES_PER_GROUP])


# ----------------------------------------------------------------------------------------- files
def weaknesses_path(store: ArtifactStore, evaluation_dir: Path) -> Path:
    return store.root / WEAKNESSES_DIR / f"{Path(evaluation_dir).name}.json"


def write_report(store: ArtifactStore, report: WeaknessReport) -> tuple[Path, Path]:
    """The report (JSON) and its plot (PNG), named after the evaluation run."""
    path = weaknesses_path(store, Path(report.evaluation))
    atomic_write_json(path, dump(report))
    return path, plot_weaknesses(report, path.with_suffix(".png"))


def latest_report(store: ArtifactStore) -> tuple[Path, WeaknessReport] | None:
    """The newest weaknesses report (evaluation runs are named by time), or None."""
    from awm_resources.documents import read

    folder = store.root / WEAKNESSES_DIR
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return (paths[-1], read(WeaknessReport, paths[-1])) if paths else None


def plot_weaknesses(report: WeaknessReport, path: Path) -> Path:
    """Fail rate per group, one panel per dimension (failure modes: share of all episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(14, 3.6), dpi=100)
    for ax, dim in zip(axes, DIMENSIONS, strict=True):
        groups = [g for g in report.groups if g.dimension == dim]
        names = [g.key for g in groups]
        bars = ax.barh(names, [g.fail_rate for g in groups], color="#c44e52")
        for bar, g in zip(bars, groups, strict=True):
            ax.annotate(f"{g.failed}/{g.episodes}", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                        va="center", fontsize=7)
        ax.set_xlim(0, 1.15)
        ax.invert_yaxis()
        ax.set_title(dim.replace("_", " "), fontsize=9)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"What {report.policy or 'the policy'} fails at: {report.failed} of {report.episodes} episodes failed",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
