"""Scenario generation for a seed batch, as the paper runs it: self-instruct candidates in rounds until the
batch's target is accepted, a CRUD-suitability classifier that also files each candidate under one category
of a fixed list, embedding dedup against every kept scenario (all batches) and the seeds themselves, and a
cap per category."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from awm_assets.synthesis import prompts
from awm_assets.synthesis.config import SynthesisConfig
from awm_assets.synthesis.models import ScenarioCandidates, SuitabilityVerdicts, TargetedScenarioCandidates
from awm_assets.synthesis.seeds import SeedBatch
from awm_resources.documents import SCENARIO_FILE, Scenario, dump
from awm_resources.llm import CallTag, LLMClient
from awm_resources.names import normalize_scenario_name
from awm_resources.store import ArtifactStore

# The fixed category list (domains of stateful web applications) that caps and diversity are counted over.
CATEGORIES = (
    "e_commerce", "marketplace", "booking_and_travel", "food_and_dining", "social_and_community",
    "project_management", "developer_tools", "finance_and_banking", "subscriptions_and_memberships",
    "inventory_and_logistics", "messaging_and_support", "lists_and_collections", "calendar_and_events",
    "forms_and_surveys", "healthcare", "education", "real_estate", "hr_and_recruiting", "legal_and_compliance",
    "media_streaming", "gaming", "smart_home_and_devices", "fitness_and_wellness", "pets", "automotive",
    "nonprofit_and_fundraising", "other",
)


def category_of(name: str | None) -> str:
    """A category of the fixed list ('other' for anything else)."""
    key = normalize_scenario_name(name or "")
    return key if key in CATEGORIES else "other"


@dataclass
class Decision:
    name: str
    key: str
    description: str
    category: str
    status: str  # accepted | rejected_classifier | rejected_duplicate | capped
    reason: str = ""
    task_styles: list[str] = field(default_factory=list)  # a targeted batch's candidates only


@dataclass
class GenerationResult:
    decisions: list[Decision] = field(default_factory=list)

    def accepted(self) -> list[Decision]:
        return [d for d in self.decisions if d.status == "accepted"]

    def counts(self) -> dict[str, int]:
        c = Counter(d.status for d in self.decisions)
        return {"generated": len(self.decisions), "accepted": c["accepted"],
                "rejected_by_classifier": c["rejected_classifier"], "rejected_as_duplicate": c["rejected_duplicate"],
                "capped": c["capped"]}


def kept_scenarios(store: ArtifactStore) -> list[dict[str, Any]]:
    """Every scenario already in the store (all batches, imported ones included)."""
    out = []
    for key in store.list_scenarios():
        sc = store.scenario(key)
        out.append({"key": key, "name": sc.name or key, "description": sc.description or "",
                    "category": sc.category or "other"})
    return out


def generate_scenarios(batch: SeedBatch, store: ArtifactStore, llm: LLMClient, embedder: Any,
                       settings: SynthesisConfig) -> GenerationResult:
    """Rounds of candidates (each round's prompt knows what is already kept) until `settings.target_scenarios`
    scenarios are accepted, or one round when no target is set; see the module docstring. A targeted batch
    (`batch.focus`, from `awm evolve`) asks with the weaknesses in the prompt, for task styles too, and
    accepts at most its `max_new_scenarios` (the rest are capped)."""
    existing = kept_scenarios(store)
    seeds = [f"{s['name']}: {s.get('description', '')}" for s in batch.seeds]
    pool = Pool(embedder, [f"{e['name']}: {e['description']}" for e in existing], seeds)
    kept_keys = {e["key"] for e in existing}
    categories = Counter(category_of(e["category"]) for e in existing)
    names = [e["name"] for e in existing]
    result = GenerationResult()
    rounds = settings.max_generation_rounds if settings.target_scenarios else 1
    batch_cap = int(batch.focus.get("max_new_scenarios", 1)) if batch.focus else None
    for round_no in range(1, rounds + 1):
        tag = CallTag(stage="scenarios", scenario=f"_batch_{batch.key}", attempt=round_no)
        cands: ScenarioCandidates | TargetedScenarioCandidates
        if batch.focus:
            cands, _ = llm.chat_json(prompts.targeted_scenario_generation(
                list(batch.seeds), names, int(batch.focus.get("candidates", settings.candidates_per_batch)), list(CATEGORIES),
                batch.focus),
                TargetedScenarioCandidates, tag=tag)
        else:
            cands, _ = llm.chat_json(prompts.scenario_generation(list(batch.seeds), names, settings.candidates_per_batch,
                                                                 list(CATEGORIES)), ScenarioCandidates, tag=tag)
        tag_cls = CallTag(stage="classify", scenario=f"_batch_{batch.key}", attempt=round_no)
        verdicts, _ = llm.chat_json(prompts.scenario_classification([c.model_dump() for c in cands.scenarios],
                                                                    list(CATEGORIES)), SuitabilityVerdicts, tag=tag_cls)
        verdict_by_name = {v.name.strip().lower(): v for v in verdicts.verdicts}
        for cand in cands.scenarios:
            verdict = verdict_by_name.get(cand.name.strip().lower())
            key = normalize_scenario_name(cand.name)
            category = category_of((verdict.category if verdict and verdict.category else None) or cand.category)
            d = Decision(cand.name.strip(), key, cand.description.strip(), category, "accepted",
                         task_styles=[t.strip() for t in getattr(cand, "task_styles", []) if t.strip()])
            text = f"{cand.name}: {cand.description}"
            if verdict is None or not verdict.suitable:
                d.status = "rejected_classifier"
                d.reason = verdict.reason if verdict else "the classifier gave no verdict for it"
            elif key in kept_keys:
                d.status, d.reason = "rejected_duplicate", f"a scenario with key {key!r} already exists"
            elif (near := pool.nearest(text, settings.dedup_threshold)) is not None:
                d.status, d.reason = "rejected_duplicate", near
            elif categories[category] >= settings.max_per_category:
                d.status, d.reason = "capped", f"category {category!r} already has {categories[category]} scenarios"
            elif batch_cap is not None and len(result.accepted()) >= batch_cap:
                d.status, d.reason = "capped", f"the targeted batch takes at most {batch_cap} new scenario(s)"
            else:
                pool.add(text)
                kept_keys.add(key)
                names.append(d.name)
                categories[category] += 1
            result.decisions.append(d)
        if not settings.target_scenarios or len(result.accepted()) >= settings.target_scenarios or (
                batch_cap is not None and len(result.accepted()) >= batch_cap):
            break
    return result


class Pool:
    """The embeddings a candidate must not come too close to: kept scenarios, then the batch's seeds (a
    scenario that restates a seed site is a copy, not a new environment)."""

    def __init__(self, embedder: Any, kept: list[str], seeds: list[str]):
        self.embedder = embedder
        self.texts = [*kept, *seeds]
        self.labels = [t.split(":")[0] for t in kept] + [f"seed {t.split(':')[0]}" for t in seeds]
        self.vecs = embedder.embed(self.texts) if self.texts else None

    def nearest(self, text: str, threshold: float) -> str | None:
        """Why `text` is a duplicate (the closest entry at or above the threshold), else None."""
        if self.vecs is None or not len(self.vecs):
            return None
        sims = self.vecs @ self.embedder.embed([text])[0]
        j = int(sims.argmax())
        if float(sims[j]) < threshold:
            return None
        return f"cosine {float(sims[j]):.3f} >= {threshold} to {self.labels[j]!r}"

    def add(self, text: str) -> None:
        import numpy as np  # the embedder has loaded it; not at module import (every code location load)

        vec = self.embedder.embed([text])
        self.vecs = vec if self.vecs is None or not len(self.vecs) else np.vstack([self.vecs, vec])
        self.texts.append(text)
        self.labels.append(text.split(":")[0])


def register_accepted(result: GenerationResult, store: ArtifactStore, batch: SeedBatch) -> list[str]:
    """Write scenario.json for every accepted scenario; returns their keys."""
    keys = []
    for d in result.accepted():
        scenario = Scenario(name=d.name, key=d.key, description=d.description, category=d.category,
                            seed_batch=batch.key, source="synthesized")
        if batch.focus:  # a targeted scenario: what it is for, which the tasks stage asks for
            scenario.task_styles = d.task_styles
            scenario.targets = [f"{w.get('dimension')}={w.get('key')}" for w in batch.focus.get("weaknesses", [])]
        store.write_json(d.key, SCENARIO_FILE, dump(scenario))
        keys.append(d.key)
    return keys


def batch_record_path(store: ArtifactStore, batch_key: str):
    return store.root / "batches" / f"{batch_key}.json"


def record_batch(store: ArtifactStore, batch: SeedBatch, result: GenerationResult,
                 usage: dict[str, Any] | None = None) -> None:
    """Remember which file version a batch was generated from (so sensors do not generate it twice) and
    what generating it cost (synthesis statistics)."""
    from awm_resources.store import atomic_write_json

    atomic_write_json(batch_record_path(store, batch.key), {
        "batch": batch.key, "path": str(batch.path), "digest": batch.digest, "counts": result.counts(),
        "usage": usage or {}, "decisions": [vars(d) for d in result.decisions]})


def batch_already_generated(store: ArtifactStore, batch: SeedBatch) -> bool:
    import json

    path = batch_record_path(store, batch.key)
    return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("digest") == batch.digest
