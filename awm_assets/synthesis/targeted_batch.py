"""The next targeted seed batch, from the newest weaknesses report (what the `targeted_seed_batch` asset writes).

The batch goes where `seed_batch_sensor` looks (`AWM_SEED_DIR`, else seeds/), named `evolve_<n>` after the
store's earlier targeted batches; its focus line carries the weakest groups with their evidence and the cap on
new scenarios (the format: awm_assets.synthesis.seeds)."""

from __future__ import annotations

import json
from typing import Any

from awm_assets.synthesis.seeds import DEFAULT_SEED_DIR, next_targeted_name, targeted_batch_lines
from awm_resources.settings import load_settings
from awm_resources.store import ArtifactStore, atomic_write_text


class NoWeaknessesReport(LookupError):
    """The store has no weaknesses report to aim a batch at."""


def _failed_scenarios(store: ArtifactStore, report: Any) -> list[dict[str, Any]]:
    """The scenarios with failed episodes (by the category groups' evidence), named and described for the prompt."""
    failed: dict[str, int] = {}
    for g in report.groups:
        if g.dimension == "category":
            for e in g.examples:
                failed[e["scenario"]] = failed.get(e["scenario"], 0) + 1
    out = []
    for key, n in failed.items():
        sc = store.scenario(key) if store.has(key, "scenario.json") else None
        out.append({"name": (sc.name if sc else None) or key, "description": (sc.description if sc else "") or "",
                    "failed": n})
    return out


def write_targeted_batch(store: ArtifactStore, *, max_new_scenarios: int = 1, candidates: int = 3,
                         weaknesses: int = 4) -> dict[str, Any]:
    """Write the next targeted seed batch from the newest weaknesses report, aimed at its `weaknesses` weakest
    groups; returns what was written (`seed_batch`, `batch`, `weaknesses`, `seeds`), or `seed_batch` None and the
    `reason` when the policy failed nothing. NoWeaknessesReport when there is no report at all."""
    from awm_rl.evaluation.weaknesses import latest_report

    latest = latest_report(store)
    if latest is None:
        raise NoWeaknessesReport("no weaknesses report in the store: materialize `weaknesses` first")
    path, report = latest
    chosen = report.weaknesses[:weaknesses]
    if not chosen:
        return {"seed_batch": None, "weaknesses_report": str(path),
                "reason": f"{report.policy} failed none of {report.episodes} episodes: nothing to aim at"}
    batches = store.root / "batches"
    name = next_targeted_name(sorted(p.stem for p in batches.glob("*.json")) if batches.is_dir() else [])
    weak = [{k: v for k, v in w.model_dump(mode="json").items() if k != "modes"} | {"modes": w.modes} for w in chosen]
    for w in weak:  # the prompt needs the evidence, not the file paths
        w["examples"] = [{k: e.get(k) for k in ("scenario", "task_idx", "task", "mode", "detail")} for e in w["examples"]]
    lines = targeted_batch_lines(weak, _failed_scenarios(store, report), evaluation=report.evaluation,
                                 max_new_scenarios=max_new_scenarios, candidates=candidates)
    out = (load_settings().paths.seed_dir or DEFAULT_SEED_DIR) / f"{name}.jsonl"  # where seed_batch_sensor looks
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return {"seed_batch": str(out), "batch": name, "weaknesses_report": str(path),
            "weaknesses": [f"{w.dimension}={w.key}" for w in chosen],
            "seeds": [json.loads(line)["name"] for line in lines[1:]]}
